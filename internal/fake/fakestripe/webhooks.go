package fakestripe

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/atomicrides/atomicrides/internal/fake/delivery"
)

// DevWebhookSecret is the signing secret of the endpoint that serve -dev
// registers with its built-in fake: not a secret, and never a real one.
const DevWebhookSecret = "whsec_fakestripe_dev_not_a_secret"

// WebhookEndpoint is where the server delivers its events, and how: as
// Stripe does, each event is signed (Stripe-Signature, with Secret, at the
// time of each attempt) and delivered at least once, retried with
// exponential backoff while the endpoint fails (a non-2xx answer, no
// answer within Timeout). The fault switches make deliveries harder:
// Duplicates more deliveries of every event, Reorder a random hold of up to
// Delay (50ms when Delay is zero) before each, so that events overtake
// each other, and Delay a hold before each delivery.
type WebhookEndpoint struct {
	URL    string `json:"url"`
	Secret string `json:"secret"`
	// Duplicates is how many extra deliveries each event gets.
	Duplicates int  `json:"duplicates,omitempty"`
	Reorder    bool `json:"reorder,omitempty"`
	// Delay holds each delivery this long (Reorder: up to this long).
	Delay time.Duration `json:"delay,omitempty"`
	// Timeout bounds one attempt; default 10 seconds.
	Timeout time.Duration `json:"timeout,omitempty"`
	// RetryBase is the first retry's backoff, doubled per attempt up to
	// RetryMax; defaults 50ms and 5s (Stripe's are hours; tests cannot wait).
	RetryBase time.Duration `json:"retry_base,omitempty"`
	RetryMax  time.Duration `json:"retry_max,omitempty"`
	// MaxAttempts per delivery; default 100.
	MaxAttempts int `json:"max_attempts,omitempty"`
}

// WebhookDelivery is one attempt to deliver an event.
type WebhookDelivery struct {
	EventID string    `json:"event_id"`
	At      time.Time `json:"at"`
	// Status is the endpoint's answer, 0 when none came.
	Status int `json:"status"`
}

// webhookSender delivers events to the endpoint set, each in its own
// goroutine.
type webhookSender struct {
	mu         sync.Mutex
	endpoint   *WebhookEndpoint
	ctx        context.Context
	cancel     context.CancelFunc
	inflight   sync.WaitGroup
	pending    atomic.Int64
	deliveries []WebhookDelivery
	client     *http.Client
}

// SetWebhookEndpoint makes the server deliver every later event to ep (nil
// stops deliveries; those in flight are abandoned).
func (s *Server) SetWebhookEndpoint(ep *WebhookEndpoint) {
	w := &s.webhooks
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		w.cancel()
	}
	w.endpoint, w.ctx, w.cancel = nil, nil, nil
	if ep == nil {
		return
	}
	e := *ep
	if e.Timeout <= 0 {
		e.Timeout = 10 * time.Second
	}
	if e.RetryBase <= 0 {
		e.RetryBase = 50 * time.Millisecond
	}
	if e.RetryMax <= 0 {
		e.RetryMax = 5 * time.Second
	}
	if e.MaxAttempts <= 0 {
		e.MaxAttempts = 100
	}
	w.endpoint = &e
	w.ctx, w.cancel = context.WithCancel(context.Background())
	if w.client == nil {
		w.client = &http.Client{}
	}
}

// Redeliver delivers every recorded event again, as an operator's "resend"
// in Stripe's dashboard would.
func (s *Server) Redeliver() {
	for _, e := range s.Events() {
		s.webhooks.send(&e)
	}
}

// WebhooksIdle waits until no delivery is pending (each answered 2xx or
// given up), or ctx ends.
func (s *Server) WebhooksIdle(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for s.webhooks.pending.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// WebhookDeliveries returns every delivery attempt so far, in order.
func (s *Server) WebhookDeliveries() []WebhookDelivery {
	w := &s.webhooks
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]WebhookDelivery(nil), w.deliveries...)
}

func (w *webhookSender) send(ev *Event) {
	w.mu.Lock()
	ep, ctx := w.endpoint, w.ctx
	w.mu.Unlock()
	if ep == nil {
		return
	}
	for range 1 + ep.Duplicates {
		w.pending.Add(1)
		w.inflight.Add(1)
		go func() {
			defer w.inflight.Done()
			defer w.pending.Add(-1)
			w.deliver(ctx, ep, ev)
		}()
	}
}

// deliver makes the attempts of one delivery.
func (w *webhookSender) deliver(ctx context.Context, ep *WebhookEndpoint, ev *Event) {
	delivery.Deliver(ctx, delivery.Schedule{Delay: ep.Delay, Reorder: ep.Reorder,
		RetryBase: ep.RetryBase, RetryMax: ep.RetryMax, MaxAttempts: ep.MaxAttempts},
		func(ctx context.Context) int { return w.attempt(ctx, ep, ev) })
}

// attempt posts the event once, signed now, and returns the status (0 for
// no answer).
func (w *webhookSender) attempt(ctx context.Context, ep *WebhookEndpoint, ev *Event) int {
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{
		Payload: ev.Payload, Secret: ep.Secret, Timestamp: time.Now(),
	})
	header := http.Header{}
	header.Set("Content-Type", "application/json; charset=utf-8")
	header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	header.Set("Stripe-Signature", signed.Header)
	status := delivery.Post(ctx, w.client, ep.URL, header, ev.Payload, ep.Timeout)
	w.mu.Lock()
	w.deliveries = append(w.deliveries, WebhookDelivery{EventID: ev.ID, At: time.Now(), Status: status})
	w.mu.Unlock()
	return status
}
