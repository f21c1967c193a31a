package fakeadyen

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// call sends one request to the fake and returns its status and body; a
// dropped connection is status 0.
func call(t *testing.T, client *http.Client, method, url, key string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	req.Header.Set("X-API-Key", "test_key")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

func ledgerOf(t *testing.T, client *http.Client, base string) Ledger {
	t.Helper()
	status, body := call(t, client, http.MethodGet, base+"/_fake/ledger", "", nil)
	require.Equal(t, http.StatusOK, status, string(body))
	var l Ledger
	require.NoError(t, json.Unmarshal(body, &l))
	return l
}

// TestControlAPI drives the fake from outside, as a harness does with the
// fakeadyen process: a fault injected over the control API loses the answer
// of a payment it made, the ledger and the journal show both, the outage
// switch answers 503 without executing, and reset forgets everything.
func TestControlAPI(t *testing.T) {
	srv := httptest.NewServer(New(Options{}))
	t.Cleanup(srv.Close)
	// No keep-alives: net/http would resend a request with an
	// Idempotency-Key on its own after a dropped reused connection.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	base := srv.URL

	status, body := call(t, client, http.MethodPost, base+"/v71/storedPaymentMethods", "store-1", map[string]any{
		"merchantAccount": "M", "shopperReference": "shopper-1",
		"paymentMethod": map[string]string{"type": "scheme", "encryptedCardNumber": "tok_visa"},
	})
	require.Equal(t, http.StatusOK, status, string(body))
	var card struct{ ID string }
	require.NoError(t, json.Unmarshal(body, &card))

	// A bad fault is refused, naming the cause; nothing is injected.
	status, body = call(t, client, http.MethodPost, base+"/_fake/faults", "", map[string]any{"op": "charge", "kind": "status", "status": 503})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(body), "unknown op")
	status, body = call(t, client, http.MethodPost, base+"/_fake/faults", "", []map[string]any{
		{"op": "payment", "kind": "drop_after", "times": 1},
		{"op": "refund", "kind": "latency", "duration": "10ms", "times": 2},
	})
	require.Equal(t, http.StatusOK, status, string(body))
	require.JSONEq(t, `{"faults":[{"op":"payment","kind":"drop_after","times":1},{"op":"refund","kind":"latency","duration":"10ms","times":2}]}`, string(body))

	pay := map[string]any{
		"merchantAccount": "M", "shopperReference": "shopper-1", "reference": "ar-ch-1",
		"amount":        map[string]any{"currency": "USD", "value": 2000},
		"paymentMethod": map[string]string{"type": "scheme", "storedPaymentMethodId": card.ID},
		"metadata":      map[string]string{"ar_key": "ar-ch-1"},
	}
	status, _ = call(t, client, http.MethodPost, base+"/v71/payments", "pay-1", pay)
	require.Equal(t, 0, status, "the answer is lost")
	l := ledgerOf(t, client, base)
	require.Len(t, l.Payments, 1, "the payment was made")
	require.Equal(t, "Authorised", l.Payments[0].ResultCode)
	require.Equal(t, "ar-ch-1", l.Payments[0].Metadata["ar_key"])
	// The retry under the key gets the saved answer: the same payment.
	status, body = call(t, client, http.MethodPost, base+"/v71/payments", "pay-1", pay)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(body), l.Payments[0].PSPReference)
	require.Len(t, ledgerOf(t, client, base).Payments, 1)

	// The outage: 503, nothing executed, journalled as such.
	status, body = call(t, client, http.MethodPost, base+"/_fake/outage", "", map[string]bool{"on": true})
	require.Equal(t, http.StatusOK, status, string(body))
	status, _ = call(t, client, http.MethodPost, base+"/v71/payments/"+l.Payments[0].PSPReference+"/refunds", "ref-1",
		map[string]any{"merchantAccount": "M", "amount": map[string]any{"currency": "USD", "value": 2000}})
	require.Equal(t, http.StatusServiceUnavailable, status)
	l = ledgerOf(t, client, base)
	require.True(t, l.Outage)
	require.Empty(t, l.Refunds)
	require.Equal(t, []Request{
		{Op: OpStore, Status: 200}, {Op: OpPayment, Dropped: true}, {Op: OpPayment, Status: 200},
		{Op: OpRefund, Status: 503, Outage: true},
	}, withoutTimes(l.Requests))
	status, _ = call(t, client, http.MethodPost, base+"/_fake/outage", "", map[string]bool{"on": false})
	require.Equal(t, http.StatusOK, status)
	status, body = call(t, client, http.MethodPost, base+"/v71/payments/"+l.Payments[0].PSPReference+"/refunds", "ref-1",
		map[string]any{"merchantAccount": "M", "amount": map[string]any{"currency": "USD", "value": 2000}})
	require.Equal(t, http.StatusCreated, status, string(body))
	l = ledgerOf(t, client, base)
	require.Len(t, l.Refunds, 1)
	require.Equal(t, l.Payments[0].PSPReference, l.Refunds[0].PaymentPSPReference)

	status, _ = call(t, client, http.MethodPost, base+"/_fake/reset", "", nil)
	require.Equal(t, http.StatusOK, status)
	l = ledgerOf(t, client, base)
	require.Empty(t, l.Payments)
	require.Empty(t, l.Refunds)
	require.Empty(t, l.Requests)
	status, body = call(t, client, http.MethodGet, base+"/_fake/faults", "", nil)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"faults":[]}`, string(body))
}

func withoutTimes(rs []Request) []Request {
	out := make([]Request, len(rs))
	for i, r := range rs {
		out[i] = Request{Op: r.Op, Status: r.Status, Dropped: r.Dropped, Outage: r.Outage}
	}
	return out
}
