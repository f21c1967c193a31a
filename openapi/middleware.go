package openapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/atomicrides/atomicrides/openapi/httpctx"
	"github.com/atomicrides/atomicrides/service"
)

type ctxKey int

const (
	ctxKeyUser ctxKey = iota
	// ctxKeyGate holds a request's *gate while it waits to be admitted
	// after its authentication.
	ctxKeyGate
)

// RequestID returns the id of the request being served, "" outside one.
func RequestID(ctx context.Context) string { return httpctx.RequestID(ctx) }

func clientIP(ctx context.Context) *netip.Addr { return httpctx.ClientIP(ctx) }

// requestContext gives every request an id (the client's X-Request-Id when it
// is sane), its client address, the mark of the request path for the
// database counters (service.RequestContext), one access log line and, when
// metrics is set, its count and duration; every response gets
// X-Content-Type-Options: nosniff.
func requestContext(logger *slog.Logger, metrics *httpMetrics, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get("X-Request-Id")
		if !saneRequestID(id) {
			var b [12]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set("X-Request-Id", id)
		// No response of this server is meant to be sniffed into another
		// type: API JSON, problem+json, pages, River UI and metrics alike.
		w.Header().Set("X-Content-Type-Options", "nosniff")
		var ip *netip.Addr
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
			addr := ap.Addr().Unmap()
			ip = &addr
		}
		ctx := service.RequestContext(httpctx.With(r.Context(), id, ip))
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		r = r.WithContext(ctx)
		next.ServeHTTP(sw, r)
		// The mux sets the pattern that served the request on r.
		metrics.observe(r.Pattern, sw.status, time.Since(start))
		logger.LogAttrs(ctx, slog.LevelInfo, "request",
			slog.String("request_id", id),
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", sw.status),
			slog.Duration("duration", time.Since(start)),
		)
	})
}

func saneRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

type statusWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(status int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = status, true
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// unmatched answers requests that no route serves with problem+json instead
// of the mux's plain text.
func unmatched(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// Let the mux decide between 404 and 405 (and set Allow), then
		// replace its body.
		mux.ServeHTTP(&problemWriter{ResponseWriter: w}, r)
	})
}

type problemWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *problemWriter) WriteHeader(status int) {
	if w.wrote {
		return
	}
	w.wrote = true
	writeProblem(w.ResponseWriter, status, "no such route")
}

func (w *problemWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusNotFound)
	}
	return len(b), nil
}

func writeProblem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"title": http.StatusText(status), "status": status, "detail": detail,
	})
}
