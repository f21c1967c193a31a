package endtoend

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// TestReplicasShareOneBudget runs two serve replicas with REDIS_URL: a
// rider's writes through both are held to one budget; with Redis killed,
// each replica falls back to its own budget, logs it once, reports it in a
// metric, and no request fails for it.
func TestReplicasShareOneBudget(t *testing.T) {
	t.Parallel()
	const admin = "shared-budget-admin-token-0123456789abcdef"
	redis := testkit.NewRedis(t)
	fake := testkit.NewStripe(t)
	_, smtpURL := testkit.NewMailSink(t)
	env := []string{
		"DATABASE_URL=" + dbtest.NewURL(t), "ADMIN_TOKEN=" + admin,
		"STRIPE_API_BASE=" + fake.URL, "STRIPE_SECRET_KEY=sk_test_shared",
		"SMTP_URL=" + smtpURL, "REDIS_URL=" + redis.URL, "RATE_LIMIT_WRITES=4/1h",
	}
	a, b := startServe(t, env...), startServe(t, env...)

	status, body := a.do(t, http.MethodPut, "/users/shared@example.com", admin, nil, `{"payment_source":"tok_visa"}`)
	require.Equal(t, http.StatusCreated, status, "%s", body)
	var created struct {
		APIKey string `json:"api_key"`
	}
	require.NoError(t, json.Unmarshal(body, &created))

	book := func(in *instance, i int) (int, []byte) {
		key := map[string]string{"Idempotency-Key": fmt.Sprintf("shared-budget-key-%06d", i)}
		return in.do(t, http.MethodPost, "/rides", created.APIKey, key, rideBody)
	}
	counts := map[int]int{}
	for i := range 8 {
		in := []*instance{a, b}[i%2]
		s, body := book(in, i)
		counts[s]++
		require.Contains(t, []int{http.StatusCreated, http.StatusTooManyRequests}, s, "%s", body)
	}
	require.Equal(t, map[int]int{http.StatusCreated: 4, http.StatusTooManyRequests: 4}, counts, "one budget for both replicas")
	require.Len(t, fake.Charges(), 4)

	// Redis gone: each replica's own buckets, full; nothing fails.
	redis.Kill()
	counts = map[int]int{}
	for i := 8; i < 18; i++ {
		s, body := book([]*instance{a, b}[i%2], i)
		require.Contains(t, []int{http.StatusCreated, http.StatusTooManyRequests}, s, "%s", body)
		counts[s]++
	}
	require.Equal(t, map[int]int{http.StatusCreated: 8, http.StatusTooManyRequests: 2}, counts, "each replica's own budget of 4")
	require.Len(t, fake.Charges(), 12)
	refused := 0.0
	for _, in := range []*instance{a, b} {
		status, body := in.do(t, http.MethodGet, "/metrics", admin, nil, "")
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, 1.0, metricValue(string(body), "atomicrides_ratelimit_redis_fallback"))
		refused += metricValue(string(body), `atomicrides_http_refused_total{reason="rider_writes"}`)
		require.Equal(t, 1, strings.Count(in.logs.String(), "Redis unreachable"), "one log line")
		require.NotContains(t, in.logs.String(), "failed to dial")
	}
	require.Equal(t, 6.0, refused, "every 429 counted")
}
