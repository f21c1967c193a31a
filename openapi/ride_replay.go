package openapi

import (
	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/atomicrides/atomicrides/service"
)

// replayFromMemory answers a replay of a booking this process saw finish
// lately before Huma binds the request: a client retrying a finished key
// gets the stored answer for the cost of decoding its body, which
// paymentDeadlines has read. It runs after the rider is authenticated and
// admitted, and takes only what it can judge exactly as the operation
// would: a bare key, a JSON body of the four coordinates in range
// (decodeFast), and a key in the service's memory with the same request.
// Everything else (another form of key or body, a key the process has not
// seen finish, a key used with another request) goes on to the operation,
// and gets the operation's answer.
func (h *handlers) replayFromMemory(ctx huma.Context, next func(huma.Context)) {
	key := ctx.Header("Idempotency-Key")
	if !bareIdempotencyKey(key) || ctx.Header("Content-Type") != "application/json" {
		next(ctx)
		return
	}
	r, _ := humago.Unwrap(ctx)
	data, ok := bufferedBytes(r)
	if !ok {
		next(ctx)
		return
	}
	var body rideCreateBody
	if !body.decodeFast(data) {
		next(ctx)
		return
	}
	resp, ok := h.svc.RideReplay(riderFrom(ctx.Context()).ID, key, body.params())
	if !ok {
		next(ctx)
		return
	}
	// As Huma writes a storedOutput.
	out := storedResponse(resp)
	ctx.SetHeader("Content-Type", out.ContentType)
	if out.Replayed != "" {
		ctx.SetHeader("Idempotent-Replayed", out.Replayed)
	}
	ctx.SetStatus(out.Status)
	_, _ = ctx.BodyWriter().Write(out.Body)
}

// bareIdempotencyKey reports whether header is an Idempotency-Key in its
// bare form, which the operation's pattern accepts and takes as it is: 20
// to 255 printable ASCII characters without spaces, not starting with a
// quote.
func bareIdempotencyKey(header string) bool {
	if len(header) < service.IdempotencyKeyMinLength || len(header) > service.IdempotencyKeyMaxLength || header[0] == '"' {
		return false
	}
	for i := 0; i < len(header); i++ {
		if header[i] < 0x21 || header[i] > 0x7e {
			return false
		}
	}
	return true
}
