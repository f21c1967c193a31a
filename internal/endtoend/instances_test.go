package endtoend

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// instance is a running `serve` process.
type instance struct {
	base string
	logs *binrun.Buffer
	proc *binrun.Process
	// proxy is checked's proxy.
	proxy     string
	proxyOnce sync.Once
}

// startServe runs `serve` with env added to the test's environment and waits
// until it is ready. Its logs are shown when the test fails.
func startServe(t *testing.T, env ...string) *instance {
	t.Helper()
	addr := binrun.FreeAddr(t)
	in := &instance{base: "http://" + addr, logs: &binrun.Buffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of %s:\n%s", in.base, in.logs.String())
		}
	})
	in.proc = binrun.Start(t, binrun.Cmd{Bin: binrun.Build(t), Args: []string{"serve"}, Output: in.logs,
		Env: append([]string{"ADDR=" + addr}, env...)})
	require.NoError(t, in.proc.Ready(context.Background(), in.base+"/readyz", time.Minute), "logs:\n%s", in.logs.String())
	return in
}

// checked is the instance's API behind a proxy that checks every exchange
// against the spec the instance serves (testkit.Conform), started on first
// use.
func (in *instance) checked(t *testing.T) string {
	t.Helper()
	in.proxyOnce.Do(func() { in.proxy = testkit.ServeConformingProxy(t, in.base) })
	return in.proxy
}

// do sends a request to the instance, authorised by the bearer token auth
// unless it is empty, and returns the answer's status and body; a non-empty
// body is sent as JSON.
func (in *instance) do(t *testing.T, method, path, auth string, header map[string]string, body string) (int, []byte) {
	t.Helper()
	h := map[string]string{}
	if auth != "" {
		h = testkit.Bearer(auth)
	}
	maps.Copy(h, header)
	r := testkit.Do(t, method, in.checked(t)+path, h, body)
	return r.Status, r.Body
}

const rideBody = testkit.SomeRideJSON

// TestTwoInstancesShareOneDatabase runs two serve processes on one database
// with the fake Stripe and a mail sink shared: both serve rides, the
// completer (on River's elected leader) finishes a request its client
// abandoned, and every charged ride gets exactly one receipt.
func TestTwoInstancesShareOneDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := dbtest.NewURL(t)
	fake := testkit.NewStripe(t)
	sink, smtpURL := testkit.NewMailSink(t)

	env := []string{
		"DATABASE_URL=" + dbURL, "ADMIN_TOKEN=two-instances-admin-token-0123456789abcdef",
		"STRIPE_API_BASE=" + fake.URL, "STRIPE_SECRET_KEY=sk_test_two",
		"SMTP_URL=" + smtpURL, "COMPLETER_INTERVAL=250ms", "COMPLETER_IDLE=1s",
	}
	pprofAddr := binrun.FreeAddr(t)
	a := startServe(t, append(env, "PPROF_ADDR="+pprofAddr)...)
	b := startServe(t, env...)
	resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/cmdline")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "PPROF_ADDR serves the runtime profiles")

	status, body := a.do(t, http.MethodPut, "/users/two@example.com", "two-instances-admin-token-0123456789abcdef", nil, `{"payment_source":"tok_visa"}`)
	require.Equal(t, http.StatusCreated, status, "%s", body)
	var created struct {
		APIKey string `json:"api_key"`
	}
	require.NoError(t, json.Unmarshal(body, &created))

	// Rides through both instances, each key retried on the other one.
	const n = 10
	for i := range n {
		first, second := a, b
		if i%2 == 1 {
			first, second = b, a
		}
		key := map[string]string{"Idempotency-Key": fmt.Sprintf("two-instances-key-%06d", i)}
		s1, b1 := first.do(t, http.MethodPost, "/rides", created.APIKey, key, rideBody)
		require.Equal(t, http.StatusCreated, s1, "%s", b1)
		s2, b2 := second.do(t, http.MethodPost, "/rides", created.APIKey, key, rideBody)
		require.Equal(t, http.StatusCreated, s2)
		require.Equal(t, b1, b2, "the other instance replays the same bytes")
	}

	// A client gives up after a processor outage (longer than stripe-go's
	// own two retries); the completer finishes it.
	fake.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultStatus, Status: 503, Times: 3})
	abandoned := map[string]string{"Idempotency-Key": "two-instances-abandoned-key"}
	status, body = b.do(t, http.MethodPost, "/rides", created.APIKey, abandoned, rideBody)
	require.Equal(t, http.StatusServiceUnavailable, status, "%s", body)

	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	binrun.WaitFor(t, 60*time.Second, "the completer to finish the abandoned key", func() bool {
		var point string
		require.NoError(t, pool.QueryRow(ctx, `SELECT recovery_point FROM idempotency_keys WHERE idempotency_key = $1`, abandoned["Idempotency-Key"]).Scan(&point))
		return point == "finished"
	})
	status, body = a.do(t, http.MethodPost, "/rides", created.APIKey, abandoned, rideBody)
	require.Equal(t, http.StatusCreated, status, "the client's late retry replays the completion: %s", body)

	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	require.NoError(t, sink.Wait(waitCtx, n+1))
	// A receipt is recorded just after the mail server accepted it.
	binrun.WaitFor(t, 60*time.Second, "every receipt to be recorded", func() bool {
		var receipts int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM receipts WHERE kind = 'ride'`).Scan(&receipts))
		require.LessOrEqual(t, receipts, n+1)
		return receipts == n+1
	})
	require.Len(t, fake.SucceededCharges(), n+1)
	var rides, leaders int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM rides WHERE charge_status = 'charged'`).Scan(&rides))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_leader`).Scan(&leaders))
	require.Equal(t, n+1, rides)
	require.Equal(t, 1, leaders)
	byID := sink.CountByMessageID()
	require.Len(t, byID, n+1)
	for id, c := range byID {
		require.Equal(t, 1, c, "message %s", id)
	}

	// Metrics: operators only; the completion is counted once, by the
	// instance that ran it.
	status, _ = a.do(t, http.MethodGet, "/metrics", "", nil, "")
	require.Equal(t, http.StatusUnauthorized, status)
	finished := func() float64 {
		sum := 0.0
		for _, in := range []*instance{a, b} {
			status, body := in.do(t, http.MethodGet, "/metrics", "two-instances-admin-token-0123456789abcdef", nil, "")
			require.Equal(t, http.StatusOK, status)
			require.Contains(t, string(body), `atomicrides_http_requests_total{route="POST /rides",status="201"}`)
			sum += metricValue(string(body), `atomicrides_completer_completions_total{outcome="finished"}`)
		}
		return sum
	}
	// The count follows the key's commit by a moment.
	binrun.WaitFor(t, 30*time.Second, "the completion to be counted", func() bool { return finished() >= 1 })
	require.Equal(t, 1.0, finished())
}

// metricValue reads one sample from the Prometheus text format; 0 when it
// is absent.
func metricValue(text, series string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}
