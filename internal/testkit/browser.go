package testkit

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// BrowserTimeout bounds everything a test does in one browser.
const BrowserTimeout = 2 * time.Minute

// ChromiumPath finds the browser: $CHROMIUM if set, else Chromium or Chrome
// on the PATH. Without one it fails t, in CI and out of it, and never skips:
// what a browser test proves is only proven in a browser.
func ChromiumPath(t testing.TB) string {
	t.Helper()
	for _, c := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("Chromium is missing in CI: .ci/run installs it (apt-get install chromium); the browser tests must run")
	}
	t.Fatal("Chromium is required for the browser tests: install it with " +
		"`sudo apt-get install -y --no-install-recommends chromium` (.ci/run does), or point CHROMIUM at a Chrome or Chromium binary")
	return ""
}

// Browser starts a headless Chromium for t alone, with a fresh profile under
// t.TempDir(), and returns its context, bounded by BrowserTimeout. The
// browser is closed when t ends. It runs without a sandbox (tests may run as
// root) and with Chromium's own traffic (updates, sync, background
// networking) turned off, since the machine may have no way out; extra
// options come last, so they may override these.
func Browser(t testing.TB, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(ChromiumPath(t)),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	opts = append(opts, extra...)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, BrowserTimeout)
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx)
		cancelTimeout()
		cancel()
		cancelAlloc()
	})
	require.NoError(t, chromedp.Do(ctx), "start Chromium")
	return ctx
}

// SaveScreenshot writes png as name in the screenshot directory and returns
// its path. The directory is the test's artifact directory under `go test
// -artifacts`, otherwise $TMPDIR/atomicrides-screenshots, which outlives the
// test so that a person can look at the pages afterwards.
func SaveScreenshot(t testing.TB, name string, png []byte) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "atomicrides-screenshots")
	if f := flag.Lookup("test.artifacts"); f != nil && f.Value.String() == "true" {
		dir = t.ArtifactDir()
	} else {
		require.NoError(t, os.MkdirAll(dir, 0o755))
	}
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, png, 0o644))
	return path
}
