package openapi

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"time"
)

// docsFiles is the API reference served at /docs: our page and its script,
// and the pinned Swagger UI bundle copied into docs/vendor from the locked
// npm package (go tool task generate; task verify checks the copy). All of
// it is embedded, so the page renders with no network beyond the service.
//
//go:embed docs/index.html docs/docs.js docs/docs.css docs/vendor/swagger-ui-bundle.js docs/vendor/swagger-ui.css
var docsFiles embed.FS

// docAsset is one file of the reference, ready to serve.
type docAsset struct {
	body        []byte
	contentType string
	etag        string
}

// docsAssets are the files of the reference by the path they are served
// at.
var docsAssets = func() map[string]docAsset {
	files := map[string]struct{ file, contentType string }{
		"/docs":                      {"docs/index.html", "text/html; charset=utf-8"},
		"/docs/swagger-ui-bundle.js": {"docs/vendor/swagger-ui-bundle.js", "text/javascript; charset=utf-8"},
		"/docs/swagger-ui.css":       {"docs/vendor/swagger-ui.css", "text/css; charset=utf-8"},
		"/docs/docs.js":              {"docs/docs.js", "text/javascript; charset=utf-8"},
		"/docs/docs.css":             {"docs/docs.css", "text/css; charset=utf-8"},
	}
	assets := make(map[string]docAsset, len(files))
	for urlPath, f := range files {
		b, err := docsFiles.ReadFile(f.file)
		if err != nil {
			panic("openapi: embedded docs file missing: " + f.file) // go:embed guarantees it
		}
		sum := sha256.Sum256(b)
		assets[urlPath] = docAsset{body: b, contentType: f.contentType, etag: `"` + hex.EncodeToString(sum[:16]) + `"`}
	}
	return assets
}()

// docsPolicy is the Content-Security-Policy of the reference: scripts and
// stylesheets from the service only (none inline, nothing evaluated from a
// string), the spec and "try it out" requests to the service only, no
// fonts, frames, forms or plugins. Swagger UI's stylesheet draws its icons
// as data: URIs, hence img-src data:. TestDocsRenderOfflineInChromium
// proves that the page renders without a violation.
const docsPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// registerDocs serves the API reference at GET /docs and its assets under
// /docs/, without authentication: it shows the spec that /openapi.json
// already publishes.
func registerDocs(mux *http.ServeMux) {
	serve := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/docs/" {
			http.Redirect(w, r, "/docs", http.StatusMovedPermanently)
			return
		}
		a, ok := docsAssets[r.URL.Path]
		if !ok {
			writeProblem(w, http.StatusNotFound, "no such file")
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("Content-Security-Policy", docsPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		// Revalidated on every use: a new deployment's page never mixes
		// with an old bundle, and an unchanged one costs a 304.
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
	}
	mux.HandleFunc("GET /docs", serve)
	mux.HandleFunc("GET /docs/", serve)
}
