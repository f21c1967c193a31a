package fakeadyen

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testHMACKey signs the notifications of the tests' endpoints.
const testHMACKey = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// testMerchant is the merchant account the tests pay under.
const testMerchant = "AtomicRidesTest"

// noteSink is a notification endpoint: it checks each item's signature and
// keeps the items it received.
type noteSink struct {
	t     *testing.T
	URL   string
	mu    sync.Mutex
	items []NotificationItem
}

func newNoteSink(t *testing.T) *noteSink {
	t.Helper()
	n := &noteSink{t: t}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Items []struct {
				Item NotificationItem `json:"NotificationRequestItem"`
			} `json:"notificationItems"`
		}
		b, err := io.ReadAll(r.Body)
		if err == nil {
			err = json.Unmarshal(b, &body)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, wrapped := range body.Items {
			it := wrapped.Item
			want, err := SignItem(it, testHMACKey)
			if err != nil || it.AdditionalData["hmacSignature"] != want {
				http.Error(w, "bad signature", http.StatusUnauthorized)
				return
			}
			n.mu.Lock()
			n.items = append(n.items, it)
			n.mu.Unlock()
		}
		_, _ = io.WriteString(w, "[accepted]")
	}))
	t.Cleanup(srv.Close)
	n.URL = srv.URL
	return n
}

// received returns the items received with eventCode.
func (n *noteSink) received(eventCode string) []NotificationItem {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []NotificationItem
	for _, it := range n.items {
		if it.EventCode == eventCode {
			out = append(out, it)
		}
	}
	return out
}

// await waits for the item with eventCode about pspRef (its pspReference
// or its originalReference) and returns it.
func (n *noteSink) await(eventCode, pspRef string) NotificationItem {
	n.t.Helper()
	var got NotificationItem
	require.Eventually(n.t, func() bool {
		for _, it := range n.received(eventCode) {
			if it.PSPReference == pspRef || it.OriginalReference == pspRef {
				got = it
				return true
			}
		}
		return false
	}, 5*time.Second, 5*time.Millisecond, "no %s notification about %s", eventCode, pspRef)
	return got
}

// env is a fake served over HTTP whose notifications reach notes.
type env struct {
	t      *testing.T
	fake   *Server
	base   string
	notes  *noteSink
	client *http.Client
}

func newEnv(t *testing.T, opts Options) *env {
	t.Helper()
	fake := New(opts)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	e := &env{t: t, fake: fake, base: srv.URL, notes: newNoteSink(t)}
	fake.SetNotificationEndpoint(&NotificationEndpoint{URL: e.notes.URL, HMACKey: testHMACKey, RetryBase: 5 * time.Millisecond})
	t.Cleanup(func() { fake.SetNotificationEndpoint(nil) })
	// The browser's redirects are the tests' to read, not to follow.
	e.client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return e
}

// post sends an API request and decodes its JSON answer.
func (e *env) post(path, key string, body any) (int, map[string]any) {
	e.t.Helper()
	status, b := call(e.t, e.client, http.MethodPost, e.base+path, key, body)
	var out map[string]any
	require.NoError(e.t, json.Unmarshal(b, &out), "answer: %s", b)
	return status, out
}

// store stores the card source for shopper and returns its id.
func (e *env) store(shopper, source string) string {
	e.t.Helper()
	status, out := e.post("/v71/storedPaymentMethods", "store-"+shopper+"-"+source, map[string]any{
		"merchantAccount": testMerchant, "shopperReference": shopper,
		"paymentMethod": map[string]string{"type": "scheme", "encryptedCardNumber": source},
	})
	require.Equal(e.t, http.StatusOK, status, "%v", out)
	return out["id"].(string)
}

// payment is the body of a payment of 2000 USD with card under reference;
// with the shopper present when returnURL is not empty.
func payment(shopper, card, reference, interaction, returnURL string) map[string]any {
	body := map[string]any{
		"merchantAccount": testMerchant, "shopperReference": shopper, "reference": reference,
		"amount":                   map[string]any{"currency": "USD", "value": 2000},
		"paymentMethod":            map[string]string{"type": "scheme", "storedPaymentMethodId": card},
		"shopperInteraction":       interaction,
		"recurringProcessingModel": "UnscheduledCardOnFile",
		"metadata":                 map[string]string{"ar_key": reference},
	}
	if returnURL != "" {
		body["channel"], body["returnUrl"] = "Web", returnURL
	}
	return body
}

// challenge pays with the card source, the shopper present, and returns
// the RedirectShopper answer's challenge URL.
func (e *env) challenge(shopper, source, reference string) string {
	e.t.Helper()
	card := e.store(shopper, source)
	status, out := e.post("/v71/payments", "pay-"+reference, payment(shopper, card, reference, InteractionEcommerce, "https://rides.example/return?key="+reference))
	require.Equal(e.t, http.StatusOK, status, "%v", out)
	require.Equal(e.t, ResultRedirectShopper, out["resultCode"], "%v", out)
	return out["action"].(map[string]any)["url"].(string)
}

// browse sends the shopper's browser to the challenge page: GET, or POST
// with form (no API key: it is not an API request).
func (e *env) browse(method, pageURL string, form url.Values) (*http.Response, string) {
	e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, pageURL, body)
	require.NoError(e.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := e.client.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return resp, string(b)
}

// answerChallenge posts the challenge page's form with action and returns
// where the browser is sent.
func (e *env) answerChallenge(pageURL, action string) *url.URL {
	e.t.Helper()
	resp, body := e.browse(http.MethodPost, pageURL, url.Values{"action": {action}})
	require.Equal(e.t, http.StatusSeeOther, resp.StatusCode, body)
	back, err := url.Parse(resp.Header.Get("Location"))
	require.NoError(e.t, err)
	return back
}

// paymentOf is the ledger's payment under reference.
func (e *env) paymentOf(reference string) Payment {
	e.t.Helper()
	var found []Payment
	for _, p := range e.fake.Payments() {
		if p.Reference == reference {
			found = append(found, p)
		}
	}
	require.Len(e.t, found, 1, "payments under %s", reference)
	return found[0]
}
