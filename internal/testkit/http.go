package testkit

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Serve serves h over HTTP until t ends and returns its base URL.
func Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
