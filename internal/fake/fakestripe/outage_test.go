package fakestripe_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
)

// TestOutage: while the outage is on (switched over the control API),
// every API request is 503 api_error, nothing is executed or saved under
// its key, injected faults stay untouched, and the journal marks the
// requests; once off, the same key executes as if first sent.
func TestOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	control := func(path, body string) int {
		req, err := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(body))
		require.NoError(t, err)
		res, _ := do(t, req)
		return res.StatusCode
	}
	e.fake.Inject(fakestripe.Fault{Op: fakestripe.OpChargeCreate, Kind: fakestripe.FaultStatus, Status: 500, Times: 1})
	require.Equal(t, http.StatusBadRequest, control("/_fake/outage", `{}`))
	require.Equal(t, http.StatusOK, control("/_fake/outage", `{"on":true}`))
	require.True(t, e.fake.Outage())

	res, body := e.post(t, "/v1/customers", testKey, "cus-key-1", url.Values{"source": {"tok_visa"}})
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	require.Equal(t, "api_error", decodeError(t, body).Error.Type)
	require.Empty(t, e.fake.Customers())
	require.Len(t, e.fake.Faults(), 1, "the outage consumes no fault")
	reqs := e.fake.Requests()
	require.Len(t, reqs, 1)
	require.True(t, reqs[0].Outage)
	require.Equal(t, http.StatusServiceUnavailable, reqs[0].Status)

	require.Equal(t, http.StatusOK, control("/_fake/outage", `{"on":false}`))
	res, body = e.post(t, "/v1/customers", testKey, "cus-key-1", url.Values{"source": {"tok_visa"}})
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	require.Len(t, e.fake.Customers(), 1)
	require.False(t, e.fake.Requests()[1].Outage)

	e.fake.SetOutage(true)
	e.fake.Reset()
	require.False(t, e.fake.Outage(), "reset switches the outage off")
}
