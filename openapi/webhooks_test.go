package openapi_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/openapi"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/payments"
)

// webhookBundle is a world whose service receives Stripe's webhooks under
// secrets, with its metrics in reg.
type webhookBundle struct {
	*testkit.Env
	url string
	reg *prometheus.Registry
}

func setupWebhooks(t *testing.T, secrets ...string) *webhookBundle {
	t.Helper()
	env := testkit.New(t)
	reg := prometheus.NewRegistry()
	inbound := map[string]service.EventSource{}
	if len(secrets) > 0 {
		events, err := payments.NewEvents(secrets, 0)
		require.NoError(t, err)
		inbound[service.InboxSourceStripe] = events
	}
	svc, err := service.New(service.Config{Pool: env.Pool, Payments: env.Payments, Registerer: reg, Inbound: inbound})
	require.NoError(t, err)
	url := testkit.ServeAPI(t, openapi.NewHandler(openapi.Config{Service: svc, Logger: slog.New(slog.DiscardHandler)}))
	return &webhookBundle{Env: env, url: url + "/webhooks/stripe", reg: reg}
}

const eventJSON = `{"id":%q,"object":"event","api_version":"2023-10-16","created":1700000000,"type":"customer.created","livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},"data":{"object":{"id":"cus_1","object":"customer","metadata":{}}}}`

func signed(body, secret string, at time.Time) map[string]string {
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(body), Secret: secret, Timestamp: at})
	return map[string]string{"Stripe-Signature": p.Header, "Content-Type": "application/json; charset=utf-8"}
}

func (b *webhookBundle) post(t *testing.T, headers map[string]string, body string) reply {
	t.Helper()
	return testkit.DoRaw(t, http.MethodPost, b.url, headers, body)
}

func TestWebhookStripeAcceptsOnceUnderAnySecret(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, "whsec_new", "whsec_old")
	body := fmt.Sprintf(eventJSON, "evt_rotation_1")

	first := b.post(t, signed(body, "whsec_old", time.Now()), body)
	require.Equal(t, http.StatusOK, first.Status, string(first.Body))
	require.Equal(t, false, first.JSON(t)["duplicate"])
	for range 4 {
		again := b.post(t, signed(body, "whsec_new", time.Now()), body)
		require.Equal(t, http.StatusOK, again.Status, string(again.Body))
		require.Equal(t, true, again.JSON(t)["duplicate"])
	}
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM inbox_events WHERE source = 'stripe' AND event_id = 'evt_rotation_1'`))
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'inbox_apply'`))
	require.Equal(t, 4.0, counter(t, b.reg, "atomicrides_inbox_received_total", "duplicate"))
}

func TestWebhookStripeRefusesAndRecordsNothing(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, "whsec_right")
	body := fmt.Sprintf(eventJSON, "evt_refused_1")
	big := fmt.Sprintf(`{"id":"evt_big","object":"event","pad":"%s"}`, strings.Repeat("x", service.MaxInboundEventBytes))

	seen := map[string]int{}
	for _, c := range []struct {
		name    string
		headers map[string]string
		body    string
		status  int
		reason  string
	}{
		{"missing signature", map[string]string{"Content-Type": "application/json"}, body, 400, "missing_signature"},
		{"wrong secret", signed(body, "whsec_wrong", time.Now()), body, 400, "bad_signature"},
		{"garbled header", map[string]string{"Stripe-Signature": "t=abc,v1=zz", "Content-Type": "application/json"}, body, 400, "bad_signature"},
		{"body changed", signed(body, "whsec_right", time.Now()), strings.Replace(body, "cus_1", "cus_2", 1), 400, "bad_signature"},
		{"stale timestamp", signed(body, "whsec_right", time.Now().Add(-10*time.Minute)), body, 400, "stale_timestamp"},
		{"not an event", signed(`{"hello":"world"}`, "whsec_right", time.Now()), `{"hello":"world"}`, 400, "not_an_event"},
		{"not json", signed(`not json`, "whsec_right", time.Now()), `not json`, 400, "not_an_event"},
		{"over 1 MiB", signed(big, "whsec_right", time.Now()), big, 413, "too_large"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := b.post(t, c.headers, c.body)
			r.Problem(t, c.status)
			if c.status == 400 {
				require.Equal(t, openapi.ProblemWebhookRejected, r.JSON(t)["type"])
			}
			seen[c.reason]++
			require.Equal(t, float64(seen[c.reason]), counter(t, b.reg, "atomicrides_inbox_rejected_total", c.reason), c.reason)
		})
	}
	require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM inbox_events`))
	require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'inbox_apply'`))
}

func TestWebhookStripeOffWithoutSecret(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t)
	body := fmt.Sprintf(eventJSON, "evt_off_1")
	b.post(t, signed(body, "whsec_any", time.Now()), body).Problem(t, http.StatusNotFound)
	require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM inbox_events`))
}

// counter returns the value of the series of counter name whose label
// other than source is value (0 when there is none).
func counter(t *testing.T, reg *prometheus.Registry, name, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "source" && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
