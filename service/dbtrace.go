package service

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// DBCounter counts what a pool sends to the database: statements, and round
// trips (a query, an Exec, a Prepare, or a whole batch, each waits for the
// server once). Requests served on behalf of a client (see RequestContext)
// are counted apart from background work (River, jobs, the completer), so
// that the round trips of one request can be read off the counters.
//
// Install it as the pool's tracer (pgx.ConnConfig.Tracer) before the pool
// is opened. It is safe for concurrent use. A statement prepared inside a
// batch, the first time a connection sees it, is sent in that batch's
// pipeline and is not counted apart.
type DBCounter struct {
	// counts[path][kind]: path 0 background, 1 request; kind 0 round
	// trips, 1 statements.
	counts [2][2]atomic.Int64
}

// DBCounts is a snapshot of a DBCounter.
type DBCounts struct {
	// RequestRoundTrips and RequestStatements were sent while serving
	// client requests (a context from RequestContext).
	RequestRoundTrips, RequestStatements int64
	// BackgroundRoundTrips and BackgroundStatements are everything else.
	BackgroundRoundTrips, BackgroundStatements int64
}

// Counts returns what the counter has seen so far.
func (c *DBCounter) Counts() DBCounts {
	return DBCounts{
		RequestRoundTrips:    c.counts[1][0].Load(),
		RequestStatements:    c.counts[1][1].Load(),
		BackgroundRoundTrips: c.counts[0][0].Load(),
		BackgroundStatements: c.counts[0][1].Load(),
	}
}

type requestPathKey struct{}

// RequestContext marks ctx as serving a client's request, for DBCounter.
// The HTTP layer marks every request's context with it.
func RequestContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, requestPathKey{}, true)
}

func pathOf(ctx context.Context) int {
	if on, _ := ctx.Value(requestPathKey{}).(bool); on {
		return 1
	}
	return 0
}

// TraceQueryStart counts a query, a QueryRow or an Exec: one statement and
// one round trip.
func (c *DBCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	p := pathOf(ctx)
	c.counts[p][0].Add(1)
	c.counts[p][1].Add(1)
	return ctx
}

// TraceQueryEnd does nothing.
func (c *DBCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a batch: one round trip for all its statements.
func (c *DBCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	p := pathOf(ctx)
	c.counts[p][0].Add(1)
	if data.Batch != nil {
		c.counts[p][1].Add(int64(data.Batch.Len()))
	}
	return ctx
}

// TraceBatchQuery does nothing: the statements were counted at the start.
func (c *DBCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd does nothing.
func (c *DBCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TracePrepareStart counts a statement prepared on its own: a round trip.
func (c *DBCounter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.counts[pathOf(ctx)][0].Add(1)
	return ctx
}

// TracePrepareEnd does nothing.
func (c *DBCounter) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// Describe implements prometheus.Collector.
func (c *DBCounter) Describe(ch chan<- *prometheus.Desc) {
	ch <- dbRoundTripsDesc
	ch <- dbStatementsDesc
}

// Collect implements prometheus.Collector: the counters, by path.
func (c *DBCounter) Collect(ch chan<- prometheus.Metric) {
	n := c.Counts()
	ch <- prometheus.MustNewConstMetric(dbRoundTripsDesc, prometheus.CounterValue, float64(n.RequestRoundTrips), "request")
	ch <- prometheus.MustNewConstMetric(dbRoundTripsDesc, prometheus.CounterValue, float64(n.BackgroundRoundTrips), "background")
	ch <- prometheus.MustNewConstMetric(dbStatementsDesc, prometheus.CounterValue, float64(n.RequestStatements), "request")
	ch <- prometheus.MustNewConstMetric(dbStatementsDesc, prometheus.CounterValue, float64(n.BackgroundStatements), "background")
}

var (
	dbRoundTripsDesc = prometheus.NewDesc("atomicrides_db_round_trips_total",
		"Round trips to the database (a statement, a prepare, or a whole batch), by path: request (serving a client) or background.",
		[]string{"path"}, nil)
	dbStatementsDesc = prometheus.NewDesc("atomicrides_db_statements_total",
		"Statements sent to the database, BEGIN and COMMIT included, by path: request (serving a client) or background.",
		[]string{"path"}, nil)
)
