package testkit_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
)

const thingsSpec = `openapi: 3.1.0
info: {title: things, version: "1"}
paths:
  /things/{id}:
    get:
      operationId: thing
      parameters:
        - {name: id, in: path, required: true, schema: {type: integer}}
        - {name: q, in: query, schema: {type: string, minLength: 1}}
      responses:
        "200":
          description: the thing
          content:
            application/json:
              schema:
                type: object
                additionalProperties: false
                required: [status]
                properties:
                  status: {type: string, enum: [none, done]}
                  extra: {type: [string, "null"], enum: [a, null]}
        "422":
          description: bad input
          content:
            application/problem+json:
              schema: {type: object}
`

// things serves thingsSpec and answers GET /things/{id} with the status
// and body its id names.
func things() http.Handler {
	answers := map[string]struct {
		status int
		body   string
	}{
		"1": {200, `{"status":"done","extra":null}`},
		"2": {200, `{"status":""}`},
		"3": {200, `{"status":"done","instance":"/things/3"}`},
		"4": {418, `{"status":"done"}`},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+testkit.SpecPath, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, thingsSpec) })
	mux.HandleFunc("GET /things/{id}", func(w http.ResponseWriter, r *http.Request) {
		a := answers[r.PathValue("id")]
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	})
	mux.HandleFunc("GET /elsewhere", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	return mux
}

// recorder is a testing.TB that keeps the errors reported to it.
type recorder struct {
	testing.TB
	mu       sync.Mutex
	errs     []string
	cleanups []func()
}

func (r *recorder) Helper() {}

// Cleanup keeps f for finish.
func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

// finish runs the cleanups kept, as the end of a test would: Conform's
// waits for the checks so far. It may run again.
func (r *recorder) finish() {
	r.mu.Lock()
	fs := slices.Clone(r.cleanups)
	r.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	errs := r.errs
	r.errs = nil
	return errs
}

// TestConform fails a test on an answer the spec does not allow (a body off
// its schema, an undeclared member, an undocumented status) and on a
// request the spec forbids that was not refused; it passes a conforming
// exchange and whatever the spec does not cover.
func TestConform(t *testing.T) {
	t.Parallel()
	rec := &recorder{TB: t}
	base := testkit.Serve(t, testkit.Conform(rec, things()))
	t.Cleanup(rec.finish)

	for _, c := range []struct {
		path string
		want string // in the error reported; "" for none
	}{
		{"/things/1", ""},
		{"/things/1?q=x", ""},
		{"/elsewhere", ""},
		{"/things/2", `"/status"`},
		{"/things/3", "instance"},
		{"/things/4", "status is not supported"},
		{"/things/1?q=", "the request is one the spec forbids"},
	} {
		r := testkit.Do(t, http.MethodGet, base+c.path, nil, "")
		require.NotZero(t, r.Status)
		rec.finish()
		errs := rec.take()
		if c.want == "" {
			require.Empty(t, errs, c.path)
			continue
		}
		require.Len(t, errs, 1, c.path)
		require.True(t, strings.Contains(errs[0], c.want), "%s: %s", c.path, errs[0])
		require.Contains(t, errs[0], "GET "+c.path)
	}
}
