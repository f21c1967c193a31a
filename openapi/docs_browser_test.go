package openapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/openapi"
)

// docsBrowser starts a headless Chromium with no way out but loopback:
// every other address goes to a proxy that refuses connections (Chromium
// never proxies loopback).
func docsBrowser(t *testing.T) context.Context {
	t.Helper()
	return testkit.Browser(t, chromedp.ProxyServer("http://127.0.0.1:9"), chromedp.WindowSize(1200, 900))
}

// The reference renders in Chromium with nothing but the service: every
// request the page makes goes to the service, the page's Content Security
// Policy is never violated, and it lists every operation of the spec with
// its summary.
func TestDocsRenderOfflineInChromium(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(openapi.NewHandler(openapi.Config{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	ctx := docsBrowser(t)

	var (
		mu         sync.Mutex
		requests   []string
		failed     []string
		exceptions []string
	)
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			requests = append(requests, ev.Request.URL)
		case *network.EventLoadingFailed:
			failed = append(failed, string(ev.RequestID)+": "+ev.ErrorText)
		case *runtime.EventExceptionThrown:
			exceptions = append(exceptions, ev.ExceptionDetails.Text)
		}
	}))
	// Record CSP violations from the first script of the page on.
	_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: `window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", e => window.__cspViolations.push(e.violatedDirective + " " + e.blockedURI));`,
	})
	require.NoError(t, err)

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/docs")))
	// Swagger UI renders once the spec has arrived; wait until every
	// operation is on the page.
	want := specOperations(t)
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](
		`document.querySelectorAll(".opblock").length >= `+itoa(int64(len(want))),
		chromedp.WithPollingTimeout(60*time.Second)))
	require.NoError(t, err, "the operations did not render")

	shown, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll(".opblock")].map(op =>
		op.querySelector(".opblock-summary-method").textContent.trim() + " " +
		op.querySelector(".opblock-summary-path").getAttribute("data-path") + " | " +
		(op.querySelector(".opblock-summary-description")?.textContent.trim() ?? ""))`))
	require.NoError(t, err)
	slices.Sort(shown)
	require.Equal(t, want, shown, "every operation is listed with its summary")

	title, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector(".info .title")?.textContent ?? ""`))
	require.NoError(t, err)
	require.Contains(t, title, "Atomic Rides")

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	shot := testkit.SaveScreenshot(t, "docs.png", png)
	t.Logf("screenshot of /docs: %s", shot)

	// Open every operation: its description, parameters and examples render
	// too, still within the policy.
	_, err = chromedp.Run(ctx, chromedp.Evaluate[int](`[...document.querySelectorAll(".opblock-summary-control")].map(b => b.click()).length`))
	require.NoError(t, err)
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](
		`document.querySelectorAll(".opblock-body .responses-table").length >= `+itoa(int64(len(want))),
		chromedp.WithPollingTimeout(60*time.Second)))
	require.NoError(t, err, "the operations did not open")
	body, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	require.NoError(t, err)
	for _, shown := range []string{"Idempotency-Key", "MVUB2FKCT3XG5OSXEUDMPBZTIZ", "ch_sUQaF4uzWHZhMy56", "/problems/idempotency-key-in-use", "Idempotent-Replayed"} {
		require.Contains(t, body, shown, "the opened operations show their contract and examples")
	}

	violations, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__cspViolations`))
	require.NoError(t, err)
	require.Empty(t, violations, "the page runs within its Content Security Policy")

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, exceptions, "no script error")
	require.Empty(t, failed, "every request of the page succeeded")
	require.NotEmpty(t, requests)
	for _, u := range requests {
		if strings.HasPrefix(u, "data:") {
			continue
		}
		require.True(t, strings.HasPrefix(u, srv.URL+"/"), "the page fetched %s from outside the service", u)
	}
	require.Contains(t, requests, srv.URL+"/openapi.json", "the page renders the service's own spec")
}

// specOperations lists the spec's operations as the reference shows them:
// "METHOD /path | summary", sorted.
func specOperations(t *testing.T) []string {
	t.Helper()
	var ops []string
	for path, item := range specJSON(t)["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			ops = append(ops, strings.ToUpper(method)+" "+path+" | "+op.(map[string]any)["summary"].(string))
		}
	}
	slices.Sort(ops)
	return ops
}

// The reference's files are served from the binary with a strict policy,
// revalidated by ETag; nothing else lives under /docs/.
func TestDocsServesItsFiles(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(openapi.NewHandler(openapi.Config{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, header ...string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}

	for path, contentType := range map[string]string{
		"/docs":                      "text/html; charset=utf-8",
		"/docs/swagger-ui-bundle.js": "text/javascript; charset=utf-8",
		"/docs/swagger-ui.css":       "text/css; charset=utf-8",
		"/docs/docs.js":              "text/javascript; charset=utf-8",
		"/docs/docs.css":             "text/css; charset=utf-8",
	} {
		resp := get(path)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Equal(t, contentType, resp.Header.Get("Content-Type"), path)
		csp := resp.Header.Get("Content-Security-Policy")
		require.Contains(t, csp, "default-src 'none'", path)
		require.Contains(t, csp, "script-src 'self';", path)
		require.Contains(t, csp, "connect-src 'self';", path)
		require.NotContains(t, csp, "unsafe-eval", path)
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), path)
		etag := resp.Header.Get("ETag")
		require.NotEmpty(t, etag, path)
		require.Equal(t, http.StatusNotModified, get(path, "If-None-Match", etag).StatusCode, path)
	}

	resp := get("/docs/")
	require.Equal(t, http.StatusMovedPermanently, resp.StatusCode)
	require.Equal(t, "/docs", resp.Header.Get("Location"))

	for _, path := range []string{"/docs/nothing.js", "/docs/vendor/LICENSE", "/docs/index.html"} {
		resp := get(path)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), path)
	}
}
