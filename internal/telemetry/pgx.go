package telemetry

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// PgxTracer traces database queries as children of the span in their
// context (pgx.ConnConfig.Tracer). A query with no recording span in its
// context is not traced, so River's polling and other background queries
// add no root spans; a traced request or job gets one span per statement,
// named after the sqlc query ("db IdempotencyKeyInsert") or the statement's
// first word ("db begin"). The statements of a batch (a pipeline: the
// service's phases send their BEGIN and COMMIT in one with their first and
// last statements) get a span each too, siblings in the order the server
// answered them, each from the previous answer (or the batch's start) to its
// own, and marked db.pipelined.
type PgxTracer struct{}

var (
	_ pgx.QueryTracer = PgxTracer{}
	_ pgx.BatchTracer = PgxTracer{}
)

type pgxSpanKey struct{}

// TraceQueryStart starts the span of a query under a recording parent.
func (PgxTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	tracer, ok := ChildTracer(ctx)
	if !ok {
		return ctx
	}
	ctx, span := tracer.Start(ctx, "db "+QueryName(data.SQL),
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("db.system.name", "postgresql"),
			attribute.String("db.query.text", data.SQL),
		))
	return context.WithValue(ctx, pgxSpanKey{}, span)
}

// TraceQueryEnd ends the span TraceQueryStart started, if any.
func (PgxTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	span, ok := ctx.Value(pgxSpanKey{}).(trace.Span)
	if !ok {
		return
	}
	if data.Err != nil {
		span.RecordError(data.Err)
		span.SetStatus(codes.Error, data.Err.Error())
	} else {
		span.SetAttributes(attribute.Int64("db.response.returned_rows", data.CommandTag.RowsAffected()))
	}
	span.End()
}

type pgxBatchKey struct{}

// pgxBatch is a traced batch in flight: its statements' spans start where
// the previous answer ended. A batch's results are read by one goroutine.
type pgxBatch struct {
	tracer trace.Tracer
	last   time.Time
}

// TraceBatchStart notes the start of a batch under a recording parent.
func (PgxTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	tracer, ok := ChildTracer(ctx)
	if !ok {
		return ctx
	}
	return context.WithValue(ctx, pgxBatchKey{}, &pgxBatch{tracer: tracer, last: time.Now()})
}

// TraceBatchQuery records the span of one statement of a traced batch, as
// its answer is read.
func (PgxTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	b, ok := ctx.Value(pgxBatchKey{}).(*pgxBatch)
	if !ok {
		return
	}
	now := time.Now()
	_, span := b.tracer.Start(ctx, "db "+QueryName(data.SQL),
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(b.last),
		trace.WithAttributes(
			attribute.String("db.system.name", "postgresql"),
			attribute.String("db.query.text", data.SQL),
			attribute.Bool("db.pipelined", true),
		))
	if data.Err != nil {
		span.RecordError(data.Err)
		span.SetStatus(codes.Error, data.Err.Error())
	} else {
		span.SetAttributes(attribute.Int64("db.response.returned_rows", data.CommandTag.RowsAffected()))
	}
	span.End(trace.WithTimestamp(now))
	b.last = now
}

// TraceBatchEnd does nothing: each statement has its span.
func (PgxTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// QueryName names a statement for its span: the name in sqlc's leading
// "-- name: X :kind" comment, else the first word, lower-cased.
func QueryName(sql string) string {
	s := strings.TrimSpace(sql)
	if rest, ok := strings.CutPrefix(s, "-- name: "); ok {
		if name, _, ok := strings.Cut(rest, " "); ok && name != "" {
			return name
		}
	}
	for strings.HasPrefix(s, "--") {
		_, s, _ = strings.Cut(s, "\n")
		s = strings.TrimSpace(s)
	}
	word, _, _ := strings.Cut(s, " ")
	word = strings.TrimRight(word, ";\n\t")
	if word == "" {
		return "query"
	}
	return strings.ToLower(word)
}
