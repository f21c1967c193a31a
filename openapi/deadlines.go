package openapi

import (
	"bytes"
	"io"
	"net/http"
	"time"

	"github.com/atomicrides/atomicrides/openapi/httpctx"
)

// paymentRoutes are the operations that call the payment processor while the
// client waits: they may run for as long as the service's lease, longer than
// the server's write timeout allows.
var paymentRoutes = map[string]bool{
	"POST /rides":             true,
	"POST /rides/{id}/refund": true,
}

// paymentDeadlines gives the requests of paymentRoutes the service's lease to
// finish in. The body is read first, under the server's read timeout, so
// that a client sending it slowly is still cut off; the bodies are small and
// bounded by maxBodyBytes (one byte more is kept, so that the API still
// answers 413 to a longer one).
func paymentDeadlines(mux *http.ServeMux, lease time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); !paymentRoutes[pattern] || lease <= 0 {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
		if err != nil {
			writeProblem(w, http.StatusBadRequest, "the request body could not be read")
			return
		}
		_ = r.Body.Close()
		r.Body = &bufferedBody{Reader: bytes.NewReader(body), data: body}
		httpctx.ExtendDeadlines(w, lease)
		next.ServeHTTP(w, r)
	})
}

// bufferedBody is a request body read whole before the handler runs, so
// that a handler may look at its bytes without reading it (see
// replayFromMemory).
type bufferedBody struct {
	*bytes.Reader
	data []byte
}

// Close does nothing: the bytes are in memory.
func (*bufferedBody) Close() error { return nil }

// bufferedBytes returns the bytes of r's body when paymentDeadlines read it
// whole, and false otherwise.
func bufferedBytes(r *http.Request) ([]byte, bool) {
	b, ok := r.Body.(*bufferedBody)
	if !ok {
		return nil, false
	}
	return b.data, true
}
