package fakestripe

import "net/http"

// SetOutage switches an outage of the whole API on or off: while it is on,
// every API request (any operation, with or without an idempotency key)
// is answered 503 api_error without executing anything, saving anything
// under its key or consuming a fault, as Stripe does when it is down. It
// is independent of the injected faults, which clearing them leaves alone.
func (s *Server) SetOutage(on bool) { s.outage.Store(on) }

// Outage reports whether the outage is on.
func (s *Server) Outage() bool { return s.outage.Load() }

// outageResponse is the answer of an API request during an outage; the
// journal marks the request.
func outageResponse(c *call) response {
	c.s.journal.update(c.rec, func(r *Request) { r.Outage = true })
	return errorResponse(http.StatusServiceUnavailable, apiError{Type: typeAPI, Message: "Sorry, something went wrong: Stripe is unavailable (outage)."})
}
