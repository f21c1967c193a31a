package limits_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/limits"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// TestPoolWait: the estimator reads a real pool's wait for a connection.
func TestPoolWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dbtest.NewURL(t))
	require.NoError(t, err)
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	wait := limits.NewPoolWait(func() (int64, time.Duration) {
		s := pool.Stat()
		return s.AcquireCount(), s.EmptyAcquireWaitTime()
	}, 0)
	require.Zero(t, wait.Mean())

	held, err := pool.Acquire(ctx)
	require.NoError(t, err)
	got := make(chan error)
	go func() {
		c, err := pool.Acquire(ctx) // waits for held
		if err == nil {
			c.Release()
		}
		got <- err
	}()
	// The waiter is waiting once the pool counts an empty acquire under way;
	// it then waits at least as long as held is kept.
	require.Eventually(t, func() bool { return pool.Stat().EmptyAcquireCount() == 1 }, 10*time.Second, time.Millisecond)
	time.Sleep(400 * time.Millisecond) // the wait being measured
	held.Release()
	require.NoError(t, <-got)
	require.GreaterOrEqual(t, wait.Mean(), 200*time.Millisecond, "two acquires, one of which waited 400ms or more")
	require.Zero(t, wait.Mean(), "nothing acquired since")
}

// TestShedderClasses: new bookings stop at the threshold minus the reserved
// share, ordinary requests and continuations at the threshold, critical
// ones never; a release makes room again.
func TestShedderClasses(t *testing.T) {
	t.Parallel()
	s := limits.NewShedder(limits.ShedConfig{InFlight: 4, Reserved: 0.5, DBWait: -1})
	var releases []func()
	admit := func(c limits.Class) string {
		r, reason := s.Admit(c)
		if r != nil {
			releases = append(releases, r)
		}
		return reason
	}
	require.Empty(t, admit(limits.NewBooking))
	require.Empty(t, admit(limits.NewBooking))
	require.Equal(t, limits.ReasonInFlight, admit(limits.NewBooking))
	require.Empty(t, admit(limits.Ordinary))
	require.Empty(t, admit(limits.Continuation))
	require.Equal(t, limits.ReasonInFlight, admit(limits.Continuation))
	require.Equal(t, limits.ReasonInFlight, admit(limits.Ordinary))
	require.Empty(t, admit(limits.Critical))
	require.Equal(t, 4, s.InFlight())
	for _, r := range releases {
		r()
		r() // a second call is harmless
	}
	require.Zero(t, s.InFlight())
	require.Empty(t, admit(limits.NewBooking))
}

// TestParsePolicy: the settings' form, and the fields it is advertised in.
func TestParsePolicy(t *testing.T) {
	t.Parallel()
	p, err := limits.ParsePolicy("writes", "50/10s")
	require.NoError(t, err)
	require.Equal(t, limits.Policy{Name: "writes", Quota: 50, Window: 10 * time.Second}, p)
	require.Equal(t, 200*time.Millisecond, p.Interval())
	require.Equal(t, `"writes";q=50;w=10`, p.Header())
	require.Equal(t, "50/10s", p.String())
	off, err := limits.ParsePolicy("reads", "off")
	require.NoError(t, err)
	require.True(t, off.Off())
	for _, bad := range []string{"", "50", "x/10s", "0/10s", "50/0s", "50/500ms", "50/48h", "2000000/1s"} {
		_, err := limits.ParsePolicy("writes", bad)
		require.Error(t, err, bad)
	}
}
