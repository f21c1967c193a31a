package main

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/openapi"
)

// What net/http answers itself, before the service's handler sees the
// request — exactly the list in docs/rides-list.md ("Answers of the HTTP
// server itself"): these answers are plain text (or empty), without
// X-Content-Type-Options, and close the connection. Every other malformed
// request reaches the handler and is answered problem+json with nosniff.
func TestHTTPServerOwnAnswers(t *testing.T) {
	t.Parallel()
	var reached atomic.Int64
	api := openapi.NewHandler(openapi.Config{Logger: slog.New(slog.DiscardHandler)})
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		api.ServeHTTP(w, r)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	send := func(t *testing.T, raw string) *http.Response {
		t.Helper()
		conn, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
		_, err = io.WriteString(conn, raw)
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	const host = "Host: x\r\n"
	for _, tc := range []struct {
		name, raw   string
		status      int
		contentType string
	}{
		{"ControlByteInHeaderValue", "GET /rides HTTP/1.1\r\n" + host + "Idempotency-Key: abc\x01def\r\n\r\n", 400, "text/plain; charset=utf-8"},
		{"InvalidHeaderName", "GET /rides HTTP/1.1\r\n" + host + "Bad Name: x\r\n\r\n", 400, "text/plain; charset=utf-8"},
		{"MissingHost", "GET /rides HTTP/1.1\r\n\r\n", 400, "text/plain; charset=utf-8"},
		{"MalformedHost", "GET /rides HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "text/plain; charset=utf-8"},
		{"MalformedRequestLine", "GET\r\n" + host + "\r\n", 400, "text/plain; charset=utf-8"},
		{"UnsupportedVersion", "GET /rides HTTP/2.0\r\n" + host + "\r\n", 505, "text/plain; charset=utf-8"},
		{"UnknownTransferEncoding", "POST /rides HTTP/1.1\r\n" + host + "Transfer-Encoding: gzip\r\n\r\n", 501, "text/plain; charset=utf-8"},
		{"HeadersTooLarge", "GET /rides HTTP/1.1\r\n" + host + "X-Big: " + strings.Repeat("a", serverMaxHeaderBytes+4096) + "\r\n\r\n", 431, "text/plain; charset=utf-8"},
		{"UnknownExpectation", "GET /rides HTTP/1.1\r\n" + host + "Expect: teapot\r\n\r\n", 417, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := reached.Load()
			resp := send(t, tc.raw)
			require.Equal(t, tc.status, resp.StatusCode)
			require.Equal(t, tc.contentType, resp.Header.Get("Content-Type"))
			require.Empty(t, resp.Header.Get("X-Content-Type-Options"))
			require.True(t, resp.Close, "the server closes the connection")
			require.Equal(t, before, reached.Load(), "the handler never saw the request")
		})
	}

	// A header the server accepts, however odd, reaches the service:
	// problem+json with nosniff.
	resp := send(t, "GET /rides HTTP/1.1\r\n"+host+"Authorization: Bearer \x80\xff\r\n\r\n")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
}
