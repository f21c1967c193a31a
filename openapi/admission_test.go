package openapi_test

import (
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/limits"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/openapi"
)

// counterOf reads the counter name whose labels include want from reg.
func counterOf(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			matched := 0
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
					matched++
				}
			}
			if matched == len(want) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// refused reads the refusals before the service of reason from reg.
func refused(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	return counterOf(t, reg, "atomicrides_http_refused_total", map[string]string{"reason": reason})
}

// admissionRefused reads the admission control's refusals of class for
// reason from reg.
func admissionRefused(t *testing.T, reg *prometheus.Registry, class, reason string) float64 {
	t.Helper()
	return counterOf(t, reg, "atomicrides_admission_refused_total", map[string]string{"class": class, "reason": reason})
}

// TestAdmissionKeepsEachClassItsShare: with a limit of 5, four bookings
// held at the processor fill the bookings' share. A new booking then
// waits in the queue and is answered 503 with Retry-After, its key unused;
// a list is refused too; the probes and the replay of a finished booking
// are served, never limited; the retry of a booking under way and a
// refund are served from the share kept for them. Once the load is gone,
// the refused key books and is charged once.
func TestAdmissionKeepsEachClassItsShare(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	metrics := limits.NewMetrics(reg)
	adm := limits.NewAdmission(limits.AdmissionConfig{Fixed: 5, Metrics: metrics})
	reg.MustRegister(adm.Collector())
	b := setupLimited(t, openapi.Limits{
		Admission: adm,
		Started:   limits.NewStarted(time.Minute, 100),
		Metrics:   metrics,
	})
	alice := b.newRider(t, "alice@example.com")
	firstKey := testkit.NewKey()
	first := b.do(t, http.MethodPost, "/rides", rider(alice, firstKey), rideBody)
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	firstID := testkit.DecodeRide(t, first.Body).ID

	// A request refused before its key was used leaves the key new.
	invalid := testkit.NewKey()
	b.do(t, http.MethodPost, "/rides", rider(alice, invalid), `{"origin_lat": 91}`).Problem(t, http.StatusUnprocessableEntity)

	gate, held := make(chan struct{}), make(chan struct{}, 4)
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultLatency, Gate: gate, Fired: held, Times: 4})
	keys := []string{testkit.NewKey(), testkit.NewKey(), testkit.NewKey(), testkit.NewKey()}
	var wg sync.WaitGroup
	answers := make([]testkit.Reply, len(keys))
	for i, k := range keys {
		wg.Go(func() { answers[i] = b.do(t, http.MethodPost, "/rides", rider(alice, k), rideBody) })
	}
	for range keys {
		<-held
	}
	require.Equal(t, 4, adm.Stats().InFlight[limits.Booking])

	k := testkit.NewKey()
	shed := b.do(t, http.MethodPost, "/rides", rider(alice, k), rideBody)
	shed.Problem(t, http.StatusServiceUnavailable)
	require.Equal(t, openapi.ProblemOverloaded, shed.JSON(t)["type"])
	after, err := strconv.Atoi(shed.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After in whole seconds")
	require.GreaterOrEqual(t, after, 1)
	require.Zero(t, b.keyRows(t, k), "a refused booking leaves its key unused")
	require.Equal(t, 1.0, admissionRefused(t, reg, "booking", limits.RefusedQueueTimeout), "it waited in the queue first")
	b.do(t, http.MethodGet, "/rides", rider(alice, ""), "").Problem(t, http.StatusServiceUnavailable)
	require.Equal(t, 1.0, admissionRefused(t, reg, "list", limits.RefusedQueueTimeout), "lists are shed first")
	b.do(t, http.MethodPost, "/rides", rider(alice, invalid), rideBody).Problem(t, http.StatusServiceUnavailable)
	require.Equal(t, 2.0, admissionRefused(t, reg, "booking", limits.RefusedQueueTimeout), "a key refused before its use books anew, as a new booking")

	// What keeps a share is served.
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/healthz", nil, "").Status)
	cont := b.do(t, http.MethodPost, "/rides", rider(alice, keys[0]), rideBody)
	cont.Problem(t, http.StatusConflict) // admitted as priority work: the key is busy, not refused
	replay := b.do(t, http.MethodPost, "/rides", rider(alice, firstKey), rideBody)
	require.Equal(t, http.StatusCreated, replay.Status, "a replay of a booking this process saw finish is never limited")
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first.Body, replay.Body)
	refund := b.do(t, http.MethodPost, "/rides/"+itoa(firstID)+"/refund", rider(alice, testkit.NewKey()), "")
	require.Equal(t, http.StatusCreated, refund.Status, string(refund.Body))
	require.Equal(t, 3.0, refused(t, reg, limits.ReasonOverloaded), "the three refusals only")

	close(gate)
	wg.Wait()
	for _, a := range answers {
		require.Equal(t, http.StatusCreated, a.Status, string(a.Body))
	}
	again := b.do(t, http.MethodPost, "/rides", rider(alice, k), rideBody)
	require.Equal(t, http.StatusCreated, again.Status, string(again.Body))
	require.Len(t, b.ChargesOfRide(t, testkit.DecodeRide(t, again.Body).ID), 1)
	require.Len(t, b.Stripe.Charges(), 6)
	require.Zero(t, adm.Stats().InFlight[limits.Booking]+adm.Stats().InFlight[limits.Priority]+adm.Stats().InFlight[limits.List])
}

// TestBudgetsComeBeforeTheSharedLimit: while the bookings' share of the
// limit is full, what a credential's own budgets refuse is answered 429 at
// once and never reaches the admission control: a rider at its limit of
// requests in flight, a rider whose writes are spent; requests without a
// credential or with a wrong one are answered 401 the same way. Only a
// request within its budgets waits for a slot, and is answered 503 when
// none frees.
func TestBudgetsComeBeforeTheSharedLimit(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	metrics := limits.NewMetrics(reg)
	adm := limits.NewAdmission(limits.AdmissionConfig{Fixed: 5, Metrics: metrics})
	b := setupLimited(t, openapi.Limits{
		Admission:        adm,
		Writes:           limits.Policy{Name: "writes", Quota: 6, Window: time.Hour},
		Concurrency:      limits.NewConcurrency(),
		RiderConcurrency: 4,
		Metrics:          metrics,
	})
	alice := b.newRider(t, "alice@example.com")
	bob := b.newRider(t, "bob@example.com")
	carol := b.newRider(t, "carol@example.com")
	for _, r := range []string{alice, bob} { // each rider's Stripe customer
		require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/rides", rider(r, testkit.NewKey()), rideBody).Status)
	}

	gate, held := make(chan struct{}), make(chan struct{}, 4)
	b.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultLatency, Gate: gate, Fired: held, Times: 4})
	var wg sync.WaitGroup
	answers := make([]testkit.Reply, 4)
	for i := range answers {
		wg.Go(func() { answers[i] = b.do(t, http.MethodPost, "/rides", rider(alice, testkit.NewKey()), rideBody) })
	}
	for range answers {
		<-held
	}
	require.Equal(t, 4, adm.Stats().InFlight[limits.Booking], "alice fills the bookings' share")

	concurrent := b.do(t, http.MethodGet, "/rides", rider(alice, ""), "")
	concurrent.Problem(t, http.StatusTooManyRequests)
	require.Equal(t, openapi.ProblemRateLimited, concurrent.JSON(t)["type"])
	require.Equal(t, "1", concurrent.Header.Get("Retry-After"))
	require.Equal(t, 1.0, counterOf(t, reg, "atomicrides_requests_refused_total", map[string]string{"reason": limits.RefusalRiderConcurrency, "class": "list"}))

	for range 20 {
		b.do(t, http.MethodPost, "/rides", rider("ar_live_wrong", testkit.NewKey()), rideBody).Problem(t, http.StatusUnauthorized)
		b.do(t, http.MethodPost, "/rides", nil, rideBody).Problem(t, http.StatusUnauthorized)
	}
	require.Zero(t, adm.Stats().Queued[limits.Booking], "no request without a valid credential waits for a slot")

	// bob's sixth write this hour is within his budget, and waits for a
	// slot that does not free; his seventh is his own excess.
	shed := b.do(t, http.MethodPost, "/rides", rider(bob, testkit.NewKey()), rideBody)
	shed.Problem(t, http.StatusServiceUnavailable)
	require.Equal(t, openapi.ProblemOverloaded, shed.JSON(t)["type"])
	for range 4 {
		b.do(t, http.MethodPost, "/rides", rider(bob, testkit.NewKey()), rideBody).Problem(t, http.StatusServiceUnavailable)
	}
	spent := b.do(t, http.MethodPost, "/rides", rider(bob, testkit.NewKey()), rideBody)
	spent.Problem(t, http.StatusTooManyRequests)
	require.NotEmpty(t, spent.Header.Get("RateLimit"))
	require.Equal(t, 5.0, admissionRefused(t, reg, "booking", limits.RefusedQueueTimeout), "bob's five writes within his budget, no more")
	require.Equal(t, 1.0, counterOf(t, reg, "atomicrides_requests_refused_total", map[string]string{"reason": limits.RefusalRiderRate, "class": "booking"}))
	require.Equal(t, 5.0, counterOf(t, reg, "atomicrides_requests_refused_total", map[string]string{"reason": limits.RefusalQueueTimeout, "class": "booking"}))

	close(gate)
	wg.Wait()
	for _, a := range answers {
		require.Equal(t, http.StatusCreated, a.Status, string(a.Body))
	}
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/rides", rider(carol, testkit.NewKey()), rideBody).Status)
	require.Zero(t, adm.Stats().InFlight[limits.Booking]+adm.Stats().InFlight[limits.List])
}
