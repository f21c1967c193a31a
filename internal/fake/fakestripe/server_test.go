package fakestripe_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
)

// The tests in this file speak raw HTTP to the fake, to pin down the wire
// behaviour that stripe-go hides.

type stripeError struct {
	Error struct {
		Type        string `json:"type"`
		Code        string `json:"code"`
		DeclineCode string `json:"decline_code"`
		Message     string `json:"message"`
		Param       string `json:"param"`
		Charge      string `json:"charge"`
	} `json:"error"`
}

func decodeError(t *testing.T, body []byte) stripeError {
	t.Helper()
	var e stripeError
	require.NoError(t, json.Unmarshal(body, &e), string(body))
	require.NotEmpty(t, e.Error.Type, string(body))
	return e
}

func customerID(t *testing.T, e *env, source string) string {
	t.Helper()
	res, body := e.post(t, "/v1/customers", testKey, "", url.Values{"source": {source}})
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	var obj struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(body, &obj))
	return obj.ID
}

func TestReplayIsByteForByte(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	cus := customerID(t, e, "tok_visa")

	res1, body1 := e.post(t, "/v1/charges", testKey, "k1", chargeForm(cus, "500"))
	require.Equal(t, http.StatusOK, res1.StatusCode)
	require.Empty(t, res1.Header.Get("Idempotent-Replayed"))
	require.True(t, strings.HasPrefix(res1.Header.Get("Request-Id"), "req_"))
	require.Equal(t, "k1", res1.Header.Get("Idempotency-Key"))

	res2, body2 := e.post(t, "/v1/charges", testKey, "k1", chargeForm(cus, "500"))
	require.Equal(t, http.StatusOK, res2.StatusCode)
	require.Equal(t, "true", res2.Header.Get("Idempotent-Replayed"))
	require.Equal(t, body1, body2)
	require.NotEqual(t, res1.Header.Get("Request-Id"), res2.Header.Get("Request-Id"))
	require.Equal(t, res1.Header.Get("Request-Id"), res2.Header.Get("Original-Request"))

	var ch map[string]any
	require.NoError(t, json.Unmarshal(body1, &ch))
	require.Equal(t, "charge", ch["object"])
	require.Equal(t, false, ch["livemode"])
	require.Equal(t, "succeeded", ch["status"])
	require.Equal(t, true, ch["paid"])
	require.Equal(t, false, ch["refunded"])
	require.Equal(t, float64(0), ch["amount_refunded"])
	require.Equal(t, map[string]any{"ride_id": "1"}, ch["metadata"])
	require.Len(t, e.fake.Charges(), 1)
}

func TestDeclineBodyIsSaved(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	cus := customerID(t, e, fakestripe.TokenChargeCustomerFail)

	res1, body1 := e.post(t, "/v1/charges", testKey, "k1", chargeForm(cus, "500"))
	require.Equal(t, http.StatusPaymentRequired, res1.StatusCode)
	se := decodeError(t, body1)
	require.Equal(t, "card_error", se.Error.Type)
	require.Equal(t, "card_declined", se.Error.Code)
	require.Equal(t, "generic_decline", se.Error.DeclineCode)
	require.Equal(t, e.fake.Charges()[0].ID, se.Error.Charge)

	res2, body2 := e.post(t, "/v1/charges", testKey, "k1", chargeForm(cus, "500"))
	require.Equal(t, http.StatusPaymentRequired, res2.StatusCode)
	require.Equal(t, "true", res2.Header.Get("Idempotent-Replayed"))
	require.Equal(t, body1, body2)
	require.Len(t, e.fake.Charges(), 1)
}

func TestAuthenticationIsRequired(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})

	res, body := e.post(t, "/v1/customers", "", "", url.Values{"source": {"tok_visa"}})
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	require.Equal(t, "invalid_request_error", decodeError(t, body).Error.Type)
	require.NotEmpty(t, res.Header.Get("Request-Id"))
	require.Empty(t, e.fake.Customers())
	require.Equal(t, 1, e.fake.RequestCount(http.MethodPost, "/v1/customers"))
}

func TestUnknownRouteIsNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	for _, path := range []string{"/v1/invoices", "/v1/charges/a/b", "/nope"} {
		res, body := e.get(t, path)
		require.Equal(t, http.StatusNotFound, res.StatusCode, path)
		require.Contains(t, decodeError(t, body).Error.Message, "Unrecognized request URL")
	}
}

func TestRetrieve(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	cus := customerID(t, e, "tok_visa")
	_, body := e.post(t, "/v1/charges", testKey, "", chargeForm(cus, "700"))
	var ch struct{ ID string }
	require.NoError(t, json.Unmarshal(body, &ch))
	_, body = e.post(t, "/v1/refunds", testKey, "", url.Values{"charge": {ch.ID}, "amount": {"300"}})
	var re struct{ ID string }
	require.NoError(t, json.Unmarshal(body, &re))

	for path, object := range map[string]string{
		"/v1/customers/" + cus: "customer",
		"/v1/charges/" + ch.ID: "charge",
		"/v1/refunds/" + re.ID: "refund",
	} {
		res, body := e.get(t, path)
		require.Equal(t, http.StatusOK, res.StatusCode, path)
		var obj map[string]any
		require.NoError(t, json.Unmarshal(body, &obj))
		require.Equal(t, object, obj["object"])
	}
	_, body = e.get(t, "/v1/charges/"+ch.ID)
	require.Contains(t, string(body), `"amount_refunded": 300`)
	require.Contains(t, string(body), `"refunded": false`)

	res, body := e.get(t, "/v1/charges/ch_missing")
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	require.Equal(t, "resource_missing", decodeError(t, body).Error.Code)
}

func TestValidationFailuresAreNotSaved(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	cus := customerID(t, e, "tok_visa")

	for param, form := range map[string]url.Values{
		"amount":   {"currency": {"usd"}, "customer": {cus}},
		"currency": {"amount": {"100"}, "customer": {cus}},
		"customer": {"amount": {"100"}, "currency": {"usd"}},
	} {
		res, body := e.post(t, "/v1/charges", testKey, "k-"+param, form)
		require.Equal(t, http.StatusBadRequest, res.StatusCode)
		se := decodeError(t, body)
		require.Equal(t, "invalid_request_error", se.Error.Type)
		require.Equal(t, "parameter_missing", se.Error.Code)
		require.Equal(t, param, se.Error.Param)

		// The key was not consumed: the corrected request executes.
		res, body = e.post(t, "/v1/charges", testKey, "k-"+param, chargeForm(cus, "100"))
		require.Equal(t, http.StatusOK, res.StatusCode, string(body))
		require.Empty(t, res.Header.Get("Idempotent-Replayed"))
	}

	res, body := e.post(t, "/v1/charges", testKey, "", url.Values{"amount": {"x"}, "currency": {"usd"}, "customer": {cus}})
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Equal(t, "parameter_invalid_integer", decodeError(t, body).Error.Code)
	res, body = e.post(t, "/v1/charges", testKey, "", url.Values{"amount": {"1"}, "currency": {"usd"}, "customer": {cus}, "capture": {"false"}})
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Equal(t, "parameter_unknown", decodeError(t, body).Error.Code)
	res, body = e.post(t, "/v1/refunds", testKey, "", url.Values{})
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Equal(t, "parameter_missing", decodeError(t, body).Error.Code)
	require.Len(t, e.fake.Charges(), 3)
}

func TestIdempotencyConflicts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	cus := customerID(t, e, "tok_visa")
	_, _ = e.post(t, "/v1/charges", testKey, "k1", chargeForm(cus, "500"))

	res, body := e.post(t, "/v1/charges", testKey, "k1", chargeForm(cus, "501"))
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	se := decodeError(t, body)
	require.Equal(t, "idempotency_error", se.Error.Type)
	require.True(t, strings.HasPrefix(se.Error.Message,
		"Keys for idempotent requests can only be used with the same parameters they were first used with"), se.Error.Message)

	res, body = e.post(t, "/v1/refunds", testKey, "k1", url.Values{"charge": {"ch_x"}})
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	se = decodeError(t, body)
	require.Equal(t, "idempotency_error", se.Error.Type)
	require.Contains(t, se.Error.Message, "same endpoint")

	// Keys are scoped per secret key.
	res, _ = e.post(t, "/v1/charges", "sk_test_other", "k1", chargeForm(cus, "501"))
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Len(t, e.fake.Charges(), 2)
}

func TestRefundRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	cus := customerID(t, e, "tok_visa")
	_, body := e.post(t, "/v1/charges", testKey, "", chargeForm(cus, "1000"))
	var ch struct{ ID string }
	require.NoError(t, json.Unmarshal(body, &ch))

	res, body := e.post(t, "/v1/refunds", testKey, "", url.Values{"charge": {ch.ID}, "amount": {"1001"}})
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Equal(t, "amount_too_large", decodeError(t, body).Error.Code)

	res, _ = e.post(t, "/v1/refunds", testKey, "", url.Values{"charge": {ch.ID}, "amount": {"400"}})
	require.Equal(t, http.StatusOK, res.StatusCode)
	res, body = e.post(t, "/v1/refunds", testKey, "", url.Values{"charge": {ch.ID}})
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(body), `"amount": 600`)

	res, body = e.post(t, "/v1/refunds", testKey, "r3", url.Values{"charge": {ch.ID}})
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Equal(t, "charge_already_refunded", decodeError(t, body).Error.Code)
	res, body2 := e.post(t, "/v1/refunds", testKey, "r3", url.Values{"charge": {ch.ID}})
	require.Equal(t, "true", res.Header.Get("Idempotent-Replayed"), "an executed 400 is saved")
	require.Equal(t, body, body2)

	res, body = e.post(t, "/v1/refunds", testKey, "", url.Values{"charge": {"ch_missing"}})
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Equal(t, "resource_missing", decodeError(t, body).Error.Code)
	require.Len(t, e.fake.Refunds(), 2)
}

func TestCustomerSources(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})

	res, body := e.post(t, "/v1/customers", testKey, "", url.Values{"source": {fakestripe.TokenChargeDeclinedInsufficientFunds}})
	require.Equal(t, http.StatusPaymentRequired, res.StatusCode)
	require.Equal(t, "insufficient_funds", decodeError(t, body).Error.DeclineCode)

	res, body = e.post(t, "/v1/customers", testKey, "", url.Values{"source": {"bogus"}})
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Equal(t, "resource_missing", decodeError(t, body).Error.Code)

	noCard := customerID(t, e, "")
	res, body = e.post(t, "/v1/charges", testKey, "", chargeForm(noCard, "100"))
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Equal(t, "missing", decodeError(t, body).Error.Code)
	require.Len(t, e.fake.Customers(), 1)
	require.Empty(t, e.fake.Charges())
}

func TestSearch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	for range 3 {
		_, _ = e.post(t, "/v1/customers", testKey, "", url.Values{"source": {"tok_visa"}, "metadata[user_id]": {"4"}})
	}
	_, _ = e.post(t, "/v1/customers", testKey, "", url.Values{"source": {"tok_visa"}, "metadata[user_id]": {"5"}})

	type page struct {
		Object   string           `json:"object"`
		Data     []map[string]any `json:"data"`
		HasMore  bool             `json:"has_more"`
		NextPage *string          `json:"next_page"`
		URL      string           `json:"url"`
	}
	search := func(query string) (int, page, []byte) {
		res, body := e.get(t, "/v1/customers/search?"+query)
		var p page
		if res.StatusCode == http.StatusOK {
			require.NoError(t, json.Unmarshal(body, &p))
		}
		return res.StatusCode, p, body
	}

	status, p, _ := search(url.Values{"query": {"metadata['user_id']:'4'"}, "limit": {"2"}}.Encode())
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "search_result", p.Object)
	require.Equal(t, "/v1/customers/search", p.URL)
	require.Len(t, p.Data, 2)
	require.True(t, p.HasMore)
	require.NotNil(t, p.NextPage)

	status, p2, _ := search(url.Values{"query": {"metadata['user_id']:'4'"}, "limit": {"2"}, "page": {*p.NextPage}}.Encode())
	require.Equal(t, http.StatusOK, status)
	require.Len(t, p2.Data, 1)
	require.False(t, p2.HasMore)
	require.Nil(t, p2.NextPage)

	status, p, _ = search(url.Values{"query": {`metadata["user_id"]:"6"`}}.Encode())
	require.Equal(t, http.StatusOK, status)
	require.Empty(t, p.Data)
	require.NotNil(t, p.Data, "data is [] rather than null")

	for _, q := range []string{"email:'a@b.c'", "metadata['user_id']:'4' AND status:'x'", ""} {
		status, _, body := search(url.Values{"query": {q}}.Encode())
		require.Equal(t, http.StatusBadRequest, status, q)
		require.Equal(t, "invalid_request_error", decodeError(t, body).Error.Type)
	}
}

func TestGetIgnoresIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	cus := customerID(t, e, "tok_visa")
	for range 2 {
		req, err := http.NewRequest(http.MethodGet, e.url+"/v1/customers/"+cus, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("Idempotency-Key", "get-key")
		res, _ := do(t, req)
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Empty(t, res.Header.Get("Idempotent-Replayed"))
	}
}

func TestRawConcurrentSameKeyExecutesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	cus := customerID(t, e, "tok_visa")
	// The request that claims the key is held until all others are answered.
	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	e.fake.Inject(fakestripe.Fault{Op: fakestripe.OpChargeCreate, Kind: fakestripe.FaultLatency, Gate: gate, Times: 1})

	const n = 200
	type answer struct {
		status int
		body   []byte
		err    error
	}
	answers := make(chan answer, n)
	for range n {
		go func() {
			req, err := http.NewRequest(http.MethodPost, e.url+"/v1/charges", strings.NewReader(chargeForm(cus, "100").Encode()))
			if err != nil {
				answers <- answer{err: err}
				return
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Authorization", "Bearer "+testKey)
			req.Header.Set("Idempotency-Key", "same")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			answers <- answer{status: res.StatusCode, body: body, err: err}
		}()
	}
	for range n - 1 {
		a := <-answers
		require.NoError(t, a.err)
		require.Equal(t, http.StatusConflict, a.status)
		require.Equal(t, "idempotency_key_in_use", decodeError(t, a.body).Error.Code)
	}
	release()
	first := <-answers
	require.NoError(t, first.err)
	require.Equal(t, http.StatusOK, first.status)

	res, body := e.post(t, "/v1/charges", testKey, "same", chargeForm(cus, "100"))
	require.Equal(t, "true", res.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first.body, body)
	require.Len(t, e.fake.Charges(), 1)
	require.Equal(t, n+1, e.fake.RequestCount(http.MethodPost, "/v1/charges"))
}

func TestRefuseFaultIsSavedUnderTheKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	cus := customerID(t, e, "tok_visa")

	// A key that already has an answer is replayed; the refusal waits.
	res, charged := e.post(t, "/v1/charges", testKey, "k-charged", chargeForm(cus, "500"))
	require.Equal(t, http.StatusOK, res.StatusCode, string(charged))
	e.fake.Inject(fakestripe.Fault{Op: fakestripe.OpChargeCreate, Kind: fakestripe.FaultRefuse, Status: http.StatusPaymentRequired, Times: 1})
	res, body := e.post(t, "/v1/charges", testKey, "k-charged", chargeForm(cus, "500"))
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, charged, body)
	require.Len(t, e.fake.Faults(), 1)

	// A new key is refused, and the refusal is its saved answer.
	res, refused := e.post(t, "/v1/charges", testKey, "k-refused", chargeForm(cus, "500"))
	require.Equal(t, http.StatusPaymentRequired, res.StatusCode)
	se := decodeError(t, refused)
	require.Equal(t, "card_error", se.Error.Type)
	require.Equal(t, "card_declined", se.Error.Code)
	require.Empty(t, e.fake.Faults())
	res, body = e.post(t, "/v1/charges", testKey, "k-refused", chargeForm(cus, "500"))
	require.Equal(t, http.StatusPaymentRequired, res.StatusCode)
	require.Equal(t, "true", res.Header.Get("Idempotent-Replayed"))
	require.Equal(t, refused, body)
	require.Len(t, e.fake.SucceededCharges(), 1, "nothing was charged for the refused key")

	require.Error(t, fakestripe.Fault{Op: fakestripe.OpAny, Kind: fakestripe.FaultRefuse, Status: 503}.Validate(),
		"a refusal is a 4xx")
}

func TestFaultTimesCountDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	e.fake.Inject(fakestripe.Fault{Op: fakestripe.OpCustomerRetrieve, Kind: fakestripe.FaultStatus, Status: 502, Times: 2})
	e.fake.Inject(fakestripe.Fault{Op: fakestripe.OpChargeCreate, Kind: fakestripe.FaultStatus, Status: 500})

	res, body := e.get(t, "/v1/customers/cus_x")
	require.Equal(t, http.StatusBadGateway, res.StatusCode)
	require.Equal(t, "api_error", decodeError(t, body).Error.Type)
	faults := e.fake.Faults()
	require.Len(t, faults, 2)
	require.Equal(t, 1, faults[0].Times)
	require.Zero(t, faults[1].Times, "unlimited")

	res, _ = e.get(t, "/v1/customers/cus_x")
	require.Equal(t, http.StatusBadGateway, res.StatusCode)
	res, _ = e.get(t, "/v1/customers/cus_x")
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	require.Len(t, e.fake.Faults(), 1)

	e.fake.ClearFaults()
	require.Empty(t, e.fake.Faults())
}

func TestInjectPanicsOnInvalidFault(t *testing.T) {
	t.Parallel()
	s := fakestripe.New(fakestripe.Options{})
	for _, f := range []fakestripe.Fault{
		{Op: "charge.explode", Kind: fakestripe.FaultDropAfter},
		{Op: fakestripe.OpAny, Kind: "melt"},
		{Op: fakestripe.OpAny, Kind: fakestripe.FaultStatus, Status: 200},
		{Op: fakestripe.OpAny, Kind: fakestripe.FaultLatency},
		{Op: fakestripe.OpAny, Kind: fakestripe.FaultDropBefore, Times: -1},
	} {
		require.Error(t, f.Validate())
		require.Panics(t, func() { s.Inject(f) })
	}
}

func TestControlEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	control := func(method, path, body string) (int, []byte) {
		req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
		require.NoError(t, err)
		res, b := do(t, req)
		return res.StatusCode, b
	}

	status, body := control(http.MethodPost, "/_fake/faults",
		`[{"op":"charge.create","kind":"status","status":503,"times":2},{"op":"*","kind":"latency","duration":"1ms"}]`)
	require.Equal(t, http.StatusOK, status, string(body))
	faults := e.fake.Faults()
	require.Len(t, faults, 2)
	require.Equal(t, time.Millisecond, faults[1].Duration)

	status, body = control(http.MethodGet, "/_fake/faults", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(body), `"duration": "1ms"`)

	status, _ = control(http.MethodPost, "/_fake/faults", `{"op":"charge.create","kind":"nope"}`)
	require.Equal(t, http.StatusBadRequest, status)
	status, _ = control(http.MethodDelete, "/_fake/faults", "")
	require.Equal(t, http.StatusOK, status)
	require.Empty(t, e.fake.Faults())

	customerID(t, e, "tok_visa")
	status, body = control(http.MethodGet, "/_fake/ledger", "")
	require.Equal(t, http.StatusOK, status)
	var snap fakestripe.Snapshot
	require.NoError(t, json.Unmarshal(body, &snap))
	require.Len(t, snap.Customers, 1)
	require.Len(t, snap.Requests, 1, "control requests are not recorded")

	before := e.fake.Now()
	status, _ = control(http.MethodPost, "/_fake/clock", `{"advance":"25h"}`)
	require.Equal(t, http.StatusOK, status)
	require.WithinDuration(t, before.Add(25*time.Hour), e.fake.Now(), time.Minute)

	status, _ = control(http.MethodPost, "/_fake/reset", "")
	require.Equal(t, http.StatusOK, status)
	require.Empty(t, e.fake.Customers())
	require.Empty(t, e.fake.Requests())
	require.WithinDuration(t, time.Now(), e.fake.Now(), time.Minute)

	status, _ = control(http.MethodGet, "/_fake/nothing", "")
	require.Equal(t, http.StatusNotFound, status)
}

func TestStart(t *testing.T) {
	t.Parallel()
	s := fakestripe.New(fakestripe.Options{})
	base, stop, err := s.Start("127.0.0.1:0")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(base, "http://127.0.0.1:"), base)

	req, err := http.NewRequest(http.MethodPost, base+"/v1/customers", strings.NewReader("source=tok_visa"))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, _ := do(t, req)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Len(t, s.Customers(), 1)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, stop(ctx))
	_, err = http.Get(base + "/_fake/ledger")
	require.Error(t, err)
}
