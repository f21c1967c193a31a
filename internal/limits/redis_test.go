package limits_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/limits"
	"github.com/atomicrides/atomicrides/internal/testkit"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSharedBudget: two limiters on one Redis (two replicas) enforce one
// budget, concurrently; when Redis dies, each falls back to its own
// buckets, says so once in its log and its metric, and never fails.
func TestSharedBudget(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedis(t)
	opt, err := limits.RedisOptions(srv.URL)
	require.NoError(t, err)
	// A loaded test machine answers slower than production's bounds.
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = 5*time.Second, 5*time.Second, 5*time.Second
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	metrics := limits.NewMetrics(reg)
	a := limits.NewShared(opt, slog.New(slog.NewTextHandler(logs, nil)), metrics)
	b := limits.NewShared(opt, slog.New(slog.NewTextHandler(logs, nil)), nil)
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })

	p := limits.Policy{Name: "writes", Quota: 10, Window: time.Hour}
	ctx := context.Background()
	var allowed sync.Map
	var wg sync.WaitGroup
	for i := range 40 {
		l := a
		if i%2 == 1 {
			l = b
		}
		wg.Go(func() {
			d := l.Allow(ctx, p, "rider-1")
			if d.Allowed {
				allowed.Store(i, true)
			} else {
				require.Greater(t, d.RetryAfter, time.Duration(0))
			}
		})
	}
	wg.Wait()
	n := 0
	allowed.Range(func(_, _ any) bool { n++; return true })
	require.Equal(t, 10, n, "one budget for both replicas; logs:\n%s", logs.String())
	spent, after := a.Spent(ctx, p, "rider-1")
	require.True(t, spent)
	require.InDelta(t, 6*time.Minute, after, float64(5*time.Second))
	require.True(t, b.Allow(ctx, p, "rider-2").Allowed, "each rider has a budget of its own")
	require.False(t, a.Fallback())

	srv.Kill()
	for _, l := range []*limits.Shared{a, b} {
		for range 10 {
			require.True(t, l.Allow(ctx, p, "rider-1").Allowed, "in-process buckets, full")
		}
		require.False(t, l.Allow(ctx, p, "rider-1").Allowed)
		require.True(t, l.Fallback())
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP atomicrides_ratelimit_redis_fallback 1 while REDIS_URL is set but Redis does not answer, so each replica enforces its own in-process budgets.
# TYPE atomicrides_ratelimit_redis_fallback gauge
atomicrides_ratelimit_redis_fallback 1
`), "atomicrides_ratelimit_redis_fallback"))
	require.Equal(t, 2, strings.Count(logs.String(), "Redis unreachable"), "one line per replica:\n%s", logs.String())
}
