package testkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// SpecPath is where the API's handler serves its OpenAPI document.
const SpecPath = "/openapi.yaml"

// maxCheckedBody is the most of a request or answer body Conform keeps to
// check; a longer body is passed on whole and left unchecked.
const maxCheckedBody = 1 << 20

// ServeAPI serves the API's handler h over HTTP until t ends, every
// exchange checked against the spec h serves (Conform), and returns its
// base URL.
func ServeAPI(t testing.TB, h http.Handler) string {
	t.Helper()
	return Serve(t, Conform(t, h))
}

// ServeConformingProxy serves, until t ends, a reverse proxy to the API
// served at base (a process of the built binary), which checks every
// exchange passing through it as Conform does, and returns its base URL.
func ServeConformingProxy(t testing.TB, base string) string {
	t.Helper()
	target, err := url.Parse(base)
	if err != nil {
		t.Fatalf("proxy to %s: %v", base, err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	// The client's own address and host, as if it asked the API itself.
	rewrite := proxy.Director
	proxy.Director = func(r *http.Request) {
		rewrite(r)
		r.Host = target.Host
		r.Header["X-Forwarded-For"] = nil
	}
	return Serve(t, Conform(t, proxy))
}

// Conform wraps h, the API's handler, so that every exchange it serves is
// checked against the OpenAPI document h itself serves at SpecPath, by
// kin-openapi's openapi3filter, and t fails with the checker's error when
// one does not conform:
//
//   - every answer to an operation of the spec must be one the operation
//     declares: its status, its media type, its body against the schema,
//     its declared headers;
//   - a request the spec forbids (a missing or empty parameter, a body
//     against its schema) must be refused with a 4xx.
//
// Requests outside the spec (the booking pages, /docs, /metrics, River UI,
// unknown routes) and methods the spec does not know on a path are passed
// on unchecked. Conform knows nothing of any one operation: whatever the
// service answers, the spec must say.
func Conform(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	c, err := checkerOf(h)
	if err != nil {
		t.Fatalf("the spec served at %s: %v", SpecPath, err)
	}
	// The checks run beside the exchanges, not on their path, so that a
	// test's timing is the service's; the test waits for the last of them.
	var checks sync.WaitGroup
	t.Cleanup(checks.Wait)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route, params, err := c.router.FindRoute(r)
		if err != nil {
			h.ServeHTTP(w, r)
			return
		}
		reqBody := &capped{buf: &bytes.Buffer{}, n: maxCheckedBody}
		hasBody := r.Body != nil && r.Body != http.NoBody
		if hasBody {
			r.Body = teeBody{Reader: io.TeeReader(r.Body, reqBody), Closer: r.Body}
		}
		rec := &recorder{ResponseWriter: w, body: capped{buf: &bytes.Buffer{}, n: maxCheckedBody}}
		h.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		if hasBody && rec.status < 400 {
			// What the handler left unread of a request it served is part
			// of the request still.
			_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxCheckedBody+1))
		}
		req := r.Clone(context.Background())
		header := rec.Header().Clone()
		checks.Add(1)
		go func() {
			defer checks.Done()
			if err := c.check(req, route, params, reqBody, rec.status, header, &rec.body); err != nil {
				t.Errorf("%s %s answered %d against the spec: %v", req.Method, req.URL.RequestURI(), rec.status, err)
			}
		}()
	})
}

// checker is a served spec, loaded once and shared by every handler that
// serves the same document.
type checker struct {
	doc    *openapi3.T
	router routers.Router
}

var checkers sync.Map // the served document → *checker

func checkerOf(h http.Handler) (*checker, error) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, SpecPath, nil))
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("answered %d", rec.Code)
	}
	spec := rec.Body.String()
	if c, ok := checkers.Load(spec); ok {
		return c.(*checker), nil
	}
	doc, err := openapi3.NewLoader().LoadFromData([]byte(spec))
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	c, _ := checkers.LoadOrStore(spec, &checker{doc: doc, router: router})
	return c.(*checker), nil
}

func (c *checker) check(req *http.Request, route *routers.Route, params map[string]string, reqBody *capped, status int, header http.Header, body *capped) error {
	ctx := context.Background()
	req.Body = io.NopCloser(bytes.NewReader(reqBody.buf.Bytes()))
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{
			// Who may call is the service's to say (and its answers' to show).
			AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
			MultiError:         true,
		},
	}
	if status < 400 && !reqBody.over {
		if err := failure(openapi3filter.ValidateRequest(ctx, in)); err != nil {
			return fmt.Errorf("the request is one the spec forbids, yet it was not refused: %w", err)
		}
	}
	if body.over {
		return nil
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 status,
		Header:                 header,
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
			ExcludeResponseBody:   req.Method == http.MethodHead,
		},
	}
	out.SetBodyBytes(body.buf.Bytes())
	return failure(openapi3filter.ValidateResponse(ctx, out))
}

// failure is err, or nil for an empty list of errors.
func failure(err error) error {
	var me openapi3.MultiError
	if errors.As(err, &me) && len(me) == 0 {
		return nil
	}
	return err
}

// recorder passes an answer on to the client and keeps its status and the
// first maxCheckedBody bytes of its body.
type recorder struct {
	http.ResponseWriter
	status int
	body   capped
}

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_, _ = w.body.Write(b)
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer
// (flushes, deadlines).
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush passes a flush on.
func (w *recorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// capped keeps the first n bytes written to it, and whether more came.
type capped struct {
	buf  *bytes.Buffer
	n    int
	over bool
}

func (c *capped) Write(b []byte) (int, error) {
	if c.buf.Len()+len(b) > c.n {
		c.over = true
		return len(b), nil
	}
	return c.buf.Write(b)
}

type teeBody struct {
	io.Reader
	io.Closer
}
