package openapi_test

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/limits"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/openapi"
)

// refused reads the refusal counter of reason from reg.
func refused(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "atomicrides_http_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestShedInFlight: past the in-flight share of new bookings, a new booking
// is answered 503 at once and writes nothing; continuations of bookings
// under way, reads (up to the whole threshold), refunds and probes are
// served; once the load is gone, the shed key books and is charged once.
func TestShedInFlight(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := setupLimited(t, openapi.Limits{
		Shedder:  limits.NewShedder(limits.ShedConfig{InFlight: 4, Reserved: 0.5, DBWait: -1}),
		Underway: limits.NewUnderway(time.Minute, 100),
		Metrics:  limits.NewMetrics(reg),
	})
	alice := b.newRider(t, "alice@example.com")
	first := b.do(t, http.MethodPost, "/rides", rider(alice, testkit.NewKey()), rideBody)
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	firstID := testkit.DecodeRide(t, first.Body).ID

	// Two bookings held at the processor fill the new bookings' share.
	gate, held := make(chan struct{}), make(chan struct{}, 2)
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultLatency, Gate: gate, Fired: held, Times: 2})
	k1, k2, k3 := testkit.NewKey(), testkit.NewKey(), testkit.NewKey()
	var wg sync.WaitGroup
	answers := make([]testkit.Reply, 2)
	for i, k := range []string{k1, k2} {
		wg.Go(func() { answers[i] = b.do(t, http.MethodPost, "/rides", rider(alice, k), rideBody) })
	}
	<-held
	<-held

	shed := b.do(t, http.MethodPost, "/rides", rider(alice, k3), rideBody)
	shed.Problem(t, http.StatusServiceUnavailable)
	require.Equal(t, openapi.ProblemOverloaded, shed.JSON(t)["type"])
	require.Equal(t, "1", shed.Header.Get("Retry-After"))
	require.Zero(t, b.keyRows(t, k3), "a shed booking leaves its key unused")
	require.Equal(t, 1.0, refused(t, reg, limits.ReasonInFlight))

	// What must not starve is served.
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/healthz", nil, "").Status)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/rides/"+itoa(firstID), rider(alice, ""), "").Status)
	cont := b.do(t, http.MethodPost, "/rides", rider(alice, k1), rideBody)
	cont.Problem(t, http.StatusConflict) // admitted as a continuation: the key is busy, not shed
	refund := b.do(t, http.MethodPost, "/rides/"+itoa(firstID)+"/refund", rider(alice, testkit.NewKey()), "")
	require.Equal(t, http.StatusCreated, refund.Status, string(refund.Body))
	require.Equal(t, 1.0, refused(t, reg, limits.ReasonInFlight))

	close(gate)
	wg.Wait()
	for _, a := range answers {
		require.Equal(t, http.StatusCreated, a.Status, string(a.Body))
	}
	again := b.do(t, http.MethodPost, "/rides", rider(alice, k3), rideBody)
	require.Equal(t, http.StatusCreated, again.Status, string(again.Body))
	require.Len(t, b.ChargesOfRide(t, testkit.DecodeRide(t, again.Body).ID), 1)
	require.Len(t, b.Stripe.Charges(), 4)
}

// TestShedDBWait: when the wait for a database connection passes the
// budget, new bookings are shed first; ordinary requests only past twice
// the budget; probes never.
func TestShedDBWait(t *testing.T) {
	t.Parallel()
	var wait atomic.Int64
	reg := prometheus.NewRegistry()
	b := setupLimited(t, openapi.Limits{
		Shedder: limits.NewShedder(limits.ShedConfig{InFlight: -1, DBWait: 500 * time.Millisecond,
			PoolWait: func() time.Duration { return time.Duration(wait.Load()) }}),
		Metrics: limits.NewMetrics(reg),
	})
	alice := b.newRider(t, "alice@example.com")
	first := b.do(t, http.MethodPost, "/rides", rider(alice, testkit.NewKey()), rideBody)
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	ride := "/rides/" + itoa(testkit.DecodeRide(t, first.Body).ID)

	wait.Store(int64(800 * time.Millisecond))
	k := testkit.NewKey()
	b.do(t, http.MethodPost, "/rides", rider(alice, k), rideBody).Problem(t, http.StatusServiceUnavailable)
	require.Zero(t, b.keyRows(t, k))
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, ride, rider(alice, ""), "").Status)

	wait.Store(int64(1500 * time.Millisecond))
	b.do(t, http.MethodGet, ride, rider(alice, ""), "").Problem(t, http.StatusServiceUnavailable)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/readyz", nil, "").Status)
	require.Equal(t, 2.0, refused(t, reg, limits.ReasonDBWait))

	wait.Store(0)
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/rides", rider(alice, k), rideBody).Status)
	require.Len(t, b.Stripe.Charges(), 2)
}
