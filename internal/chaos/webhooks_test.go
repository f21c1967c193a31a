package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
)

// Webhooks in the chaos: the fake Stripe delivers every event it makes,
// signed, to the serve instances through a balancer in the test process
// (any instance, at random; a killed one answers 502 and the fake retries),
// with duplicates, reordering and delays switched on. The serve processes
// run the events pass every chaosEventsPassInterval.
//
// A restore run also shortens the processor's idempotency window to
// chaosKeyWindow, at the fake (-key-window) and at the service
// (STRIPE_KEY_WINDOW: a development convenience refused for Stripe's own
// API), so that the orphan grace, which must outlast it, ends within the
// run and the orphan policy acts.

const (
	// chaosWebhookSecret signs the fake's deliveries (STRIPE_WEBHOOK_SECRET).
	chaosWebhookSecret = "whsec_chaos_not_a_secret_0123456789"
	// chaosEventsPassInterval is EVENTS_PASS_INTERVAL.
	chaosEventsPassInterval = 5 * time.Second
	// chaosWebhookDelay bounds the random hold of each delivery.
	chaosWebhookDelay = 300 * time.Millisecond
)

// chaosKeyWindow is the restore run's key window, at the fake and at the
// service: short, so that clients of lost bookings come back both within
// it and past it. Past it the processor has forgotten the key; the service
// judges the key's age from the database's gap, not from its own new
// record (service/database_gaps.go), and looks the payment up first. The
// full run's clients come back later.
func chaosKeyWindow() time.Duration {
	if *chaosFullFlag {
		return 60 * time.Second
	}
	return 30 * time.Second
}

// chaosOrphanGrace is the restore run's orphan grace: twice the key
// window, as by default.
func chaosOrphanGrace() time.Duration { return 2 * chaosKeyWindow() }

// chaosWebhooks is the webhook side of a chaos system.
type chaosWebhooks struct {
	db       chaosDB
	balancer string // URL of the balancer's /webhooks/stripe
	// ln is the balancer's listener, bound before the instances start:
	// PUBLIC_URL, where riders come back from their bank, is the balancer
	// too, as it is a load balancer in production.
	ln net.Listener
}

// listen binds the balancer's address, for the instances' PUBLIC_URL.
func (h *chaosWebhooks) listen(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h.ln = ln
}

func newChaosWebhooks(db chaosDB) *chaosWebhooks { return &chaosWebhooks{db: db} }

// shortWindow reports whether the run shortens the key window (a restore).
func (h *chaosWebhooks) shortWindow() bool { return h.db == chaosDBRestore }

// adyenNotified reports whether the run delivers Adyen's notifications:
// the restore runs, where they are the only way the service learns of the
// Adyen payments and refunds the lost commits held (resent after the
// restore), and the main run, whose trips at Adyen complete only with
// their CAPTURE notification (trips_test.go). Their delivery under
// crashes is tested in jobs too
// (TestAdyenNotificationsDuplicatedAndReorderedAppliedOnce).
func (h *chaosWebhooks) adyenNotified(sys *chaosSystem) bool {
	return sys.adyen != "" && (h.shortWindow() || h.db == chaosDBSingle)
}

// stripeArgs are the fake Stripe's extra arguments.
func (h *chaosWebhooks) stripeArgs() []string {
	if !h.shortWindow() {
		return nil
	}
	return []string{"-key-window", chaosKeyWindow().String()}
}

// env is the serve processes' (and the CLI's) extra environment.
func (h *chaosWebhooks) env() []string {
	env := []string{"STRIPE_WEBHOOK_SECRET=" + chaosWebhookSecret, "EVENTS_PASS_INTERVAL=" + chaosEventsPassInterval.String()}
	if h.ln != nil {
		env = append(env, "PUBLIC_URL=http://"+h.ln.Addr().String())
	}
	if h.shortWindow() {
		env = append(env, "STRIPE_KEY_WINDOW="+chaosKeyWindow().String(), "ORPHAN_REFUND_AFTER="+chaosOrphanGrace().String())
	}
	return env
}

// start serves the balancer over sys's instances and points the fake's
// webhook endpoint at it.
func (h *chaosWebhooks) start(t *testing.T, ctx context.Context, sys *chaosSystem) {
	t.Helper()
	bases := sys.bases()
	targets := make([]*url.URL, len(bases))
	for i, b := range bases {
		u, err := url.Parse(b)
		require.NoError(t, err)
		targets[i] = u
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(targets[rand.IntN(len(targets))])
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) },
	}
	if h.ln == nil {
		h.listen(t)
	}
	ln := h.ln
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	h.balancer = "http://" + ln.Addr().String() + "/webhooks/stripe"
	if h.adyenNotified(sys) {
		// Adyen's notifications, through the same balancer, with the
		// same faults.
		require.NoError(t, sys.adyenControl(ctx, http.MethodPost, "notifications", map[string]any{
			"url": "http://" + ln.Addr().String() + "/webhooks/adyen", "hmac_key": fakeadyen.DevHMACKey,
			"duplicates": 1, "reorder": true, "delay": chaosWebhookDelay,
			"timeout": 5 * time.Second, "retry_base": 100 * time.Millisecond, "retry_max": 2 * time.Second, "max_attempts": 200,
		}, nil))
	}
	require.NoError(t, sys.stripeControl(ctx, http.MethodPost, "webhooks", map[string]any{
		"url": h.balancer, "secret": chaosWebhookSecret,
		"duplicates": 1, "reorder": true, "delay": chaosWebhookDelay,
		"timeout": 5 * time.Second, "retry_base": 100 * time.Millisecond, "retry_max": 2 * time.Second, "max_attempts": 200,
	}, nil))
}

// chaosEvents is the fake's GET /_fake/events.
type chaosEvents struct {
	Events []struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	} `json:"events"`
	Deliveries []struct {
		EventID string `json:"event_id"`
		Status  int    `json:"status"`
	} `json:"deliveries"`
	Pending int64 `json:"pending"`
}

func (sys *chaosSystem) stripeEvents(ctx context.Context) (*chaosEvents, error) {
	var ev chaosEvents
	return &ev, sys.stripeControl(ctx, http.MethodGet, "events", nil, &ev)
}

// webhooksIdle waits, bounded by within, until the fake has no delivery
// pending (each answered 2xx, or given up).
func (sys *chaosSystem) webhooksIdle(ctx context.Context, within time.Duration) error {
	return binrun.Poll(ctx, within, func() error {
		ev, err := sys.stripeEvents(ctx)
		if err == nil && ev.Pending > 0 {
			err = fmt.Errorf("%d webhook deliveries pending", ev.Pending)
		}
		return err
	})
}

// adyenNotificationsIdle waits, bounded by within, until the fake Adyen
// has no notification delivery pending.
func (sys *chaosSystem) adyenNotificationsIdle(ctx context.Context, within time.Duration) error {
	return binrun.Poll(ctx, within, func() error {
		var n struct {
			Pending int64 `json:"pending"`
		}
		err := sys.adyenControl(ctx, http.MethodGet, "notifications", nil, &n)
		if err == nil && n.Pending > 0 {
			err = fmt.Errorf("%d Adyen notification deliveries pending", n.Pending)
		}
		return err
	})
}

// orphansResolved waits, bounded by within, until `keys reconcile` is
// clean: the orphan policy has resolved every orphan of the restore (its
// grace ends within the run) and the events pass has recorded what the
// lost commits held.
func (sys *chaosSystem) orphansResolved(ctx context.Context, within time.Duration) error {
	return binrun.Poll(ctx, within, func() error {
		rec, err := sys.reconcile(ctx)
		if err == nil && rec.exit != 0 {
			err = fmt.Errorf("keys reconcile lists %d charges, %d refunds, %d missing, %d holds",
				len(rec.OrphanCharges), len(rec.OrphanRefunds), len(rec.MissingCharges), len(rec.OrphanHolds))
		}
		return err
	})
}

// dashboardLane plays Stripe's dashboard and the riders' banks until stop:
// every interval it refunds a charged ride in the dashboard, opens a
// dispute, or decides an open one (won or lost), each delivered to the
// service only as events. It returns what it did.
func dashboardLane(ctx context.Context, sys *chaosSystem, interval time.Duration, stop <-chan struct{}, flog *chaosFaultLog) map[string]int {
	did := map[string]int{}
	var open []string
	for {
		select {
		case <-ctx.Done():
			return did
		case <-stop:
			return did
		case <-time.After(interval):
		}
		l, err := sys.stripeLedger(ctx)
		if err != nil {
			continue
		}
		disputed := map[string]bool{}
		for _, d := range l.Disputes {
			disputed[d.Charge] = true
		}
		var candidates []string
		for _, c := range l.Charges {
			// Rides' charges: not the payment of a trip's fare above its
			// hold, nor of its balance, which no ride names as its charge.
			if c.Status == "succeeded" && !c.Refunded && !disputed[c.ID] && c.Metadata["ar_ns"] != "" && !tripExtraKey(c.Metadata["ar_key"]) {
				candidates = append(candidates, c.ID)
			}
		}
		switch n := rand.IntN(3); {
		case n == 2 && len(open) > 0:
			status := []string{"won", "lost"}[rand.IntN(2)]
			if err := sys.stripeControl(ctx, http.MethodPost, "disputes/close", map[string]string{"dispute": open[0], "status": status}, nil); err == nil {
				did["dispute "+status]++
				flog.event("dashboard: dispute %s closed %s", open[0], status)
			}
			open = open[1:]
		case len(candidates) == 0:
		case n == 0:
			ch := candidates[rand.IntN(len(candidates))]
			if err := sys.stripeControl(ctx, http.MethodPost, "dashboard/refunds", map[string]string{"charge": ch}, nil); err == nil {
				did["dashboard refund"]++
				flog.event("dashboard: charge %s refunded", ch)
			}
		default:
			ch := candidates[rand.IntN(len(candidates))]
			var d struct {
				ID string `json:"id"`
			}
			if err := sys.stripeControl(ctx, http.MethodPost, "disputes", map[string]string{"charge": ch}, &d); err == nil {
				did["dispute opened"]++
				open = append(open, d.ID)
				flog.event("dashboard: dispute %s opened on charge %s", d.ID, ch)
			}
		}
	}
}

// runDashboard starts dashboardLane; the returned function stops it and
// returns what it did.
func runDashboard(ctx context.Context, sys *chaosSystem, interval time.Duration, flog *chaosFaultLog) func() map[string]int {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var did map[string]int
	wg.Go(func() { did = dashboardLane(ctx, sys, interval, stop, flog) })
	return func() map[string]int {
		close(stop)
		wg.Wait()
		return did
	}
}

// dashboardNote renders what the dashboard lane did.
func dashboardNote(did map[string]int) string {
	if len(did) == 0 {
		return "dashboard: nothing"
	}
	out := "dashboard (events only):"
	for _, k := range sortedKeys(did) {
		out += " " + k + " ×" + strconv.Itoa(did[k]) + ","
	}
	return out[:len(out)-1]
}
