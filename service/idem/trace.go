package idem

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Span attributes of the engine's phases.
const (
	attrFlow       = attribute.Key("atomicrides.flow")
	attrPhaseFrom  = attribute.Key("atomicrides.phase.from")
	attrPhaseTo    = attribute.Key("atomicrides.phase.to")
	attrPhaseClaim = attribute.Key("atomicrides.phase.claim")
	attrKeyID      = attribute.Key("atomicrides.key.id")
	attrStatus     = attribute.Key("atomicrides.response.status")
	attrReplayed   = attribute.Key("atomicrides.replayed")
	attrTxAttempts = attribute.Key("db.transaction.attempts")
)

// PhaseClaim is the "from" of a claim transaction that runs no phase: its
// failpoints and its span are named after it.
const PhaseClaim RecoveryPoint = "claim"

// phaseSpanName names the span of an atomic phase: its flow and the
// recovery point it leaves ("claim" for a claim that runs no phase).
func phaseSpanName(flow string, from RecoveryPoint) string {
	return "phase " + flow + " " + string(from)
}

// startPhase starts the span of one atomic phase (one transaction, its
// retries included). claim marks the transaction that claims the key; its
// from is known only once the key is read, and set by endPhase.
func (e *Engine) startPhase(ctx context.Context, flow string, from RecoveryPoint, claim bool) (context.Context, trace.Span) {
	return e.tracer.Start(ctx, phaseSpanName(flow, from), trace.WithAttributes(
		attrFlow.String(flow), attrPhaseFrom.String(string(from)), attrPhaseClaim.Bool(claim),
	))
}

// endPhase records what the phase did and ends its span: the recovery
// point it left, the one it reached (or the response it finished with),
// the key and the error that rolled it back.
func endPhase(span trace.Span, flow string, from RecoveryPoint, key *Key, o Outcome, resp *Response, err error) {
	span.SetName(phaseSpanName(flow, from))
	span.SetAttributes(attrPhaseFrom.String(string(from)))
	if key != nil {
		span.SetAttributes(attrKeyID.Int64(key.ID))
	}
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case resp != nil && resp.Replayed:
		span.SetAttributes(attrReplayed.Bool(true), attrStatus.Int(resp.Status))
	case o.kind == outcomeMoveTo:
		span.SetAttributes(attrPhaseTo.String(string(o.point)))
	case o.kind == outcomeFinish:
		span.SetAttributes(attrPhaseTo.String(string(Finished)), attrStatus.Int(o.status))
	}
	span.End()
}

// traceTxAttempt notes on the span of ctx that a transaction is run again
// after a failure that a rerun may cure.
func traceTxAttempt(ctx context.Context, attempt int, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent("transaction retried", trace.WithAttributes(
		attribute.Int("attempt", attempt), attribute.String("error", err.Error()),
	))
	span.SetAttributes(attrTxAttempts.Int(attempt + 1))
}
