package testkit

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Serve serves h over HTTP until t ends and returns its base URL.
func Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// Listen binds an HTTP server's address for the rest of t and returns its
// base URL, and serve, which serves h there: for a service that must know
// its own URL (Options.PublicURL) before its handler exists.
func Listen(t testing.TB) (base string, serve func(h http.Handler)) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	t.Cleanup(srv.Close)
	return "http://" + srv.Listener.Addr().String(), func(h http.Handler) {
		srv.Config.Handler = h
		srv.Start()
	}
}

// Reply is an HTTP answer read whole: its status, header and body.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body as a JSON object; it fails t if the body is not
// one.
func (r Reply) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &m), string(r.Body))
	return m
}

// Problem asserts that r is a problem+json answer with status, in its
// status line and its body, and returns the locations its errors name
// (such as "body.origin_lat" or "header.Idempotency-Key"), in order.
func (r Reply) Problem(t testing.TB, status int) []string {
	t.Helper()
	require.Equal(t, status, r.Status, string(r.Body))
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	m := r.JSON(t)
	require.EqualValues(t, status, m["status"])
	var locs []string
	if errs, ok := m["errors"].([]any); ok {
		for _, e := range errs {
			if loc, ok := e.(map[string]any)["location"].(string); ok {
				locs = append(locs, loc)
			}
		}
	}
	return locs
}

// Do sends method url with headers and body, and returns the answer read
// whole. A non-empty body is sent as JSON: Content-Type application/json,
// unless headers name another. It fails t if no answer comes.
func Do(t testing.TB, method, url string, headers map[string]string, body string) Reply {
	t.Helper()
	return send(t, method, url, headers, body, body != "")
}

// DoRaw is Do with exactly the headers given: no Content-Type is added.
func DoRaw(t testing.TB, method, url string, headers map[string]string, body string) Reply {
	t.Helper()
	return send(t, method, url, headers, body, false)
}

func send(t testing.TB, method, url string, headers map[string]string, body string, asJSON bool) Reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if asJSON {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Bearer is the header of a request authorised by token.
func Bearer(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}
