package openapi_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakeadyen"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/openapi"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/adyen"
)

const (
	adyenKeyNew = "11111111111111111111111111111111111111111111111111111111111111aa"
	adyenKeyOld = "22222222222222222222222222222222222222222222222222222222222222bb"
)

// setupAdyenWebhooks is a world whose service receives Adyen's
// notifications for merchant account "TestMerchant" under keys.
func setupAdyenWebhooks(t *testing.T, keys ...string) *webhookBundle {
	t.Helper()
	env := testkit.New(t)
	reg := prometheus.NewRegistry()
	inbound := map[string]service.EventSource{}
	if len(keys) > 0 {
		notes, err := adyen.NewNotifications(keys, "TestMerchant")
		require.NoError(t, err)
		inbound[service.InboxSourceAdyen] = notes
	}
	svc, err := service.New(service.Config{Pool: env.Pool, Payments: env.Payments, Registerer: reg, Inbound: inbound})
	require.NoError(t, err)
	url := testkit.ServeAPI(t, openapi.NewHandler(openapi.Config{Service: svc, Logger: slog.New(slog.DiscardHandler)}))
	return &webhookBundle{Env: env, url: url + "/webhooks/adyen", reg: reg}
}

var adyenItem = fakeadyen.NotificationItem{
	Amount:    fakeadyen.NotifiedAmount{Currency: "EUR", Value: 1130},
	EventCode: "AUTHORISATION", EventDate: "2026-11-25T12:00:00+01:00",
	MerchantAccountCode: "TestMerchant", MerchantReference: "TestPayment-1407325143704",
	PSPReference: "7914073381342284", Success: "true",
}

var jsonHeaders = map[string]string{"Content-Type": "application/json"}

func adyenBody(t *testing.T, key string, items ...fakeadyen.NotificationItem) string {
	t.Helper()
	b, err := fakeadyen.NotificationBody(key, items...)
	require.NoError(t, err)
	return string(b)
}

func TestWebhookAdyenAcceptsOnceUnderAnyKey(t *testing.T) {
	t.Parallel()
	b := setupAdyenWebhooks(t, adyenKeyNew, adyenKeyOld)
	second := adyenItem
	second.PSPReference, second.EventCode, second.OriginalReference = "7914073381342299", "REFUND", adyenItem.PSPReference

	first := b.post(t, jsonHeaders, adyenBody(t, adyenKeyOld, adyenItem, second))
	require.Equal(t, http.StatusOK, first.Status, string(first.Body))
	require.Equal(t, openapi.AdyenAccepted, string(first.Body))
	for range 4 {
		again := b.post(t, jsonHeaders, adyenBody(t, adyenKeyNew, adyenItem))
		require.Equal(t, http.StatusOK, again.Status, string(again.Body))
		require.Equal(t, openapi.AdyenAccepted, string(again.Body))
	}
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM inbox_events WHERE source = 'adyen' AND event_id = '7914073381342284:AUTHORISATION:true'`))
	require.Equal(t, 1, b.Count(t, `SELECT count(*) FROM inbox_events WHERE source = 'adyen' AND event_id = '7914073381342299:REFUND:true'`))
	require.Equal(t, 2, b.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'inbox_apply'`))
	require.Equal(t, 4.0, counter(t, b.reg, "atomicrides_inbox_received_total", "duplicate"))
}

func TestWebhookAdyenRefusesAndRecordsNothing(t *testing.T) {
	t.Parallel()
	b := setupAdyenWebhooks(t, adyenKeyNew)
	good := adyenBody(t, adyenKeyNew, adyenItem)
	tampered := strings.Replace(good, `"value":1130`, `"value":1`, 1)
	unsigned := strings.Replace(good, `"hmacSignature"`, `"hmacSignatureX"`, 1)
	other := adyenItem
	other.PSPReference = "7914073381342300"
	// One good item and one signed with an unknown key: all refused.
	mixed := adyenBody(t, adyenKeyNew, adyenItem)
	mixed = mixed[:len(mixed)-2] + "," + strings.TrimSuffix(strings.TrimPrefix(adyenBody(t, adyenKeyOld, other), `{"live":"false","notificationItems":[`), "]}") + "]}"
	noDate := adyenItem
	noDate.EventDate = "yesterday"
	big := `{"live":"false","pad":"` + strings.Repeat("x", service.MaxInboundEventBytes) + `"}`

	seen := map[string]int{}
	for _, c := range []struct {
		name   string
		body   string
		status int
		reason string
	}{
		{"wrong key", adyenBody(t, adyenKeyOld, adyenItem), 400, "bad_signature"},
		{"amount changed", tampered, 400, "bad_signature"},
		{"one bad item of two", mixed, 400, "bad_signature"},
		{"no signature", unsigned, 400, "missing_signature"},
		{"not json", `not json`, 400, "not_an_event"},
		{"no items", `{"live":"false","notificationItems":[]}`, 400, "not_an_event"},
		{"bad event date", adyenBody(t, adyenKeyNew, noDate), 400, "not_an_event"},
		{"over 1 MiB", big, 413, "too_large"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := b.post(t, jsonHeaders, c.body)
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

func TestWebhookAdyenOffWithoutKey(t *testing.T) {
	t.Parallel()
	b := setupAdyenWebhooks(t)
	b.post(t, jsonHeaders, adyenBody(t, adyenKeyNew, adyenItem)).Problem(t, http.StatusNotFound)
	require.Equal(t, 0, b.Count(t, `SELECT count(*) FROM inbox_events`))
}
