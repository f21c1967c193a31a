package main

import (
	"context"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"
)

// Bounds of every HTTP server the binary runs (the API, METRICS_ADDR and
// PPROF_ADDR). A client that sends its headers or its body slowly, reads the
// answer slowly or holds an idle connection open is cut off; a route that
// legitimately takes longer extends its own deadlines
// (httpctx.ExtendDeadlines), never the server's.
const (
	serverReadHeaderTimeout = 10 * time.Second
	serverReadTimeout       = 30 * time.Second
	serverWriteTimeout      = 30 * time.Second
	serverIdleTimeout       = 30 * time.Second
	// serverMaxHeaderBytes caps the request line and headers; a request
	// with more is answered 431.
	serverMaxHeaderBytes = 64 << 10
)

// newHTTPServer returns a server of h with the bounds above.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: serverReadHeaderTimeout,
		ReadTimeout:       serverReadTimeout,
		WriteTimeout:      serverWriteTimeout,
		IdleTimeout:       serverIdleTimeout,
		MaxHeaderBytes:    serverMaxHeaderBytes,
	}
}

// maxProfileSeconds bounds the duration of a CPU profile or an execution
// trace taken through PPROF_ADDR.
const maxProfileSeconds = 300

// pprofHandlers are the runtime profiles of net/http/pprof.
func pprofHandlers() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", timedProfile(pprof.Profile, 30))
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", timedProfile(pprof.Trace, 1))
	return mux
}

// timedProfile lets a profile that records for ?seconds= (default def) run
// past the server's write timeout: its own deadline becomes the recording
// time plus a margin. net/http/pprof refuses a duration beyond the write
// timeout of the server in the request's context, so the handler sees one
// whose write timeout is that deadline.
func timedProfile(h http.HandlerFunc, def int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sec := def
		if s := r.FormValue("seconds"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 || n > maxProfileSeconds {
				http.Error(w, "seconds: want a whole number of seconds from 1 to "+strconv.Itoa(maxProfileSeconds), http.StatusBadRequest)
				return
			}
			sec = n
		}
		d := time.Duration(sec)*time.Second + serverWriteTimeout
		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(time.Now().Add(d))
		_ = rc.SetReadDeadline(time.Now().Add(d))
		ctx := context.WithValue(r.Context(), http.ServerContextKey, &http.Server{WriteTimeout: d})
		h(w, r.WithContext(ctx))
	}
}
