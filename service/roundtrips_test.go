package service_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// TestRideRoundTrips counts, with the pgx tracer the server installs
// (service.DBCounter), the round trips a request sends to the database: a
// new ride takes seven (the target is at most eight), BEGIN, COMMIT and each
// phase's fence included, each travelling with a statement; a replay read
// from the database one (one statement, no transaction), and one the
// process remembers none.
func TestRideRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := service.RequestContext(context.Background())
	pool, counter, sent := countedPool(t)
	fake := testkit.NewStripe(t)
	newService := func() *service.Service {
		svc, err := service.New(service.Config{Pool: pool, Payments: fake.Payments()})
		require.NoError(t, err)
		return svc
	}
	svc := newService()
	user, err := testkit.NewAccounts(t, svc, nil).UserUpsert(context.Background(), accounts.UserUpsertParams{Email: "roundtrips@example.com", PaymentSource: "tok_visa"})
	require.NoError(t, err)
	uid := user.User.ID

	// A first ride, and its replay by another process, prepare the
	// statements on the pool's one connection.
	warmKey := testkit.NewKey()
	first, err := svc.RideCreate(ctx, uid, warmKey, testkit.SomeRide, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, first.Status)
	_, err = newService().RideCreate(ctx, uid, warmKey, testkit.SomeRide, nil)
	require.NoError(t, err)

	measure := func(fn func()) service.DBCounts { return counted(counter, sent, fn) }
	key := testkit.NewKey()
	var ride *service.Response
	n := measure(func() {
		ride, err = svc.RideCreate(ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, ride.Status)
	})
	t.Logf("a new ride: %d round trips, %d statements:\n%s", n.RequestRoundTrips, n.RequestStatements, sent)
	require.LessOrEqual(t, n.RequestRoundTrips, int64(8), "round trips of a new ride: the target")
	require.EqualValues(t, 7, n.RequestRoundTrips, "round trips of a new ride")
	require.Zero(t, n.BackgroundRoundTrips, "a request's statements are counted as the request's")

	// Another process (another Service, started before the measure: it
	// reads the deployment's namespace as it starts) replays the key from
	// the database.
	other := newService()
	n = measure(func() {
		again, err := other.RideCreate(ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, ride.Body, again.Body)
	})
	t.Logf("a replay from the database: %d round trips, %d statements:\n%s", n.RequestRoundTrips, n.RequestStatements, sent)
	require.EqualValues(t, 1, n.RequestRoundTrips, "round trips of a replay")
	require.EqualValues(t, 1, n.RequestStatements, "statements of a replay")

	// The process that finished the key replays it from memory.
	n = measure(func() {
		again, err := svc.RideCreate(ctx, uid, key, testkit.SomeRide, nil)
		require.NoError(t, err)
		require.True(t, again.Replayed)
	})
	require.Zero(t, n.RequestRoundTrips, "round trips of a replay the process remembers")
}

// countedPool is a pool of one connection on a database of its own, whose
// round trips and statements counter counts and sent records.
func countedPool(t *testing.T) (*pgxpool.Pool, *service.DBCounter, *roundTripLog) {
	t.Helper()
	counter, sent := &service.DBCounter{}, &roundTripLog{}
	cfg, err := pgxpool.ParseConfig(dbtest.NewURL(t))
	require.NoError(t, err)
	cfg.MaxConns = 1
	cfg.ConnConfig.Tracer = multitracer.New(counter, sent)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, counter, sent
}

// counted runs fn and returns what it sent to the database, counted by
// counter.
func counted(counter *service.DBCounter, sent *roundTripLog, fn func()) service.DBCounts {
	before := counter.Counts()
	sent.reset()
	fn()
	after := counter.Counts()
	if notify := sent.count("notify"); notify > 0 {
		// River announces new jobs to other processes at most once per
		// queue every 100 ms (its FetchCooldown): not a cost of each
		// request, and not deterministic.
		after.RequestRoundTrips -= int64(notify)
		after.RequestStatements -= int64(notify)
	}
	return service.DBCounts{
		RequestRoundTrips:    after.RequestRoundTrips - before.RequestRoundTrips,
		RequestStatements:    after.RequestStatements - before.RequestStatements,
		BackgroundRoundTrips: after.BackgroundRoundTrips - before.BackgroundRoundTrips,
		BackgroundStatements: after.BackgroundStatements - before.BackgroundStatements,
	}
}

// roundTripLog records the first line of each round trip's statements, for
// the test's log.
type roundTripLog struct {
	mu   sync.Mutex
	sent []string
}

func (l *roundTripLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent = append(l.sent, s)
}

func (l *roundTripLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent = nil
}

func (l *roundTripLog) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.sent {
		if strings.Contains(strings.ToLower(s), substr) {
			n++
		}
	}
	return n
}

func (l *roundTripLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.sent, "\n")
}

func firstLine(sql string) string {
	sql = strings.TrimSpace(sql)
	if strings.HasPrefix(sql, "-- name: ") {
		name, _, _ := strings.Cut(strings.TrimPrefix(sql, "-- name: "), " ")
		return name
	}
	line, _, _ := strings.Cut(sql, "\n")
	return line
}

func (l *roundTripLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	l.add(firstLine(data.SQL))
	return ctx
}

func (l *roundTripLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *roundTripLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	var stmts []string
	for _, q := range data.Batch.QueuedQueries {
		stmts = append(stmts, firstLine(q.SQL))
	}
	l.add("[" + strings.Join(stmts, "; ") + "]")
	return ctx
}

func (l *roundTripLog) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (l *roundTripLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (l *roundTripLog) TracePrepareStart(ctx context.Context, _ *pgx.Conn, data pgx.TracePrepareStartData) context.Context {
	l.add("prepare " + firstLine(data.SQL))
	return ctx
}

func (l *roundTripLog) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// TestTripRoundTrips counts the round trips of a trip (CaptureTrip): the
// booking that holds the fare, then its completion by the dispatch side,
// which captures it.
func TestTripRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := service.RequestContext(context.Background())
	pool, counter, sent := countedPool(t)
	fake := testkit.NewStripe(t)
	svc, err := service.New(service.Config{Pool: pool, Payments: fake.Payments(), Capture: service.CaptureTrip})
	require.NoError(t, err)
	user, err := testkit.NewAccounts(t, svc, nil).UserUpsert(context.Background(), accounts.UserUpsertParams{Email: "trip-roundtrips@example.com", PaymentSource: "tok_visa"})
	require.NoError(t, err)

	trip := func() {
		resp, err := svc.RideCreate(ctx, user.User.ID, testkit.NewKey(), testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
		ride := testkit.DecodeRide(t, resp.Body)
		resp, err = svc.RideComplete(ctx, testkit.NewKey(), service.RideCompleteParams{RideID: ride.ID, FareCents: 1850, Currency: "usd"}, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
	}
	trip() // prepares the statements on the pool's one connection
	n := counted(counter, sent, trip)
	t.Logf("a trip: %d round trips, %d statements:\n%s", n.RequestRoundTrips, n.RequestStatements, sent)
	require.EqualValues(t, 14, n.RequestRoundTrips, "round trips of a trip")
	require.EqualValues(t, 24, n.RequestStatements, "statements of a trip")
}
