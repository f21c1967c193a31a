package fakestripe

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// Options configure a Server. The zero value is ready to use.
type Options struct {
	// Clock is the time source for object timestamps and idempotency key
	// expiry; it is called concurrently. Advance shifts it further.
	// Defaults to time.Now.
	Clock func() time.Time
	// Logger receives one line per API request. Defaults to discarding.
	Logger *slog.Logger
	// KeyLifetime is how long an idempotency key is remembered: Stripe's
	// KeyLifetime (24 hours) when zero. A test shortens it to see keys
	// forgotten within its run (the chaos's orphan policy); the service
	// must then be told the same window (STRIPE_KEY_WINDOW).
	KeyLifetime time.Duration
	// PublicURL is the base URL browsers reach the server at, for the
	// challenge page a PaymentIntent's next_action sends the rider to
	// (PublicURL + "/_fake/challenge/" + id). When empty, the page's URL
	// is built from the Host of the request that confirmed the
	// PaymentIntent, so a server under httptest needs no configuration.
	PublicURL string
}

// Server is the fake Stripe API. It implements http.Handler and is safe for
// concurrent use; serve it with httptest.NewServer or Start.
type Server struct {
	clock    func() time.Time
	offset   atomic.Int64 // nanoseconds added to clock by Advance
	log      *slog.Logger
	ledger   ledger
	idem     idempotencyStore
	faults   faultStore
	journal  journal
	events   eventLog
	webhooks webhookSender
	disputes disputes
	outage   atomic.Bool // outage.go
	// publicURL is Options.PublicURL, without a trailing slash.
	publicURL string
}

// New returns an empty Server.
func New(opts Options) *Server {
	s := &Server{clock: opts.Clock, log: opts.Logger, publicURL: strings.TrimRight(opts.PublicURL, "/")}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.ledger.init()
	s.idem.lifetime = opts.KeyLifetime
	s.idem.init()
	return s
}

// KeyLifetime is how long the server remembers an idempotency key.
func (s *Server) KeyLifetime() time.Duration { return s.idem.lifetime }

// Now is the server's current time: Options.Clock plus every Advance.
func (s *Server) Now() time.Time {
	return s.clock().Add(time.Duration(s.offset.Load()))
}

// Advance moves the server's clock forward by d, e.g. past the 24-hour
// lifetime of idempotency keys.
func (s *Server) Advance(d time.Duration) {
	s.offset.Add(int64(d))
}

// Reset forgets every object, idempotency key, recorded request and fault,
// switches the outage off, and undoes every Advance.
func (s *Server) Reset() {
	s.ledger.reset()
	s.idem.reset()
	s.faults.clear()
	s.journal.reset()
	s.events.reset()
	s.offset.Store(0)
	s.outage.Store(false)
}

// Start serves s on addr (e.g. "127.0.0.1:0") until stop is called. It
// returns the base URL to configure clients with and a stop function that
// shuts the listener down gracefully, waiting for in-flight requests until
// ctx is done and then closing their connections.
func (s *Server) Start(addr string) (baseURL string, stop func(ctx context.Context) error, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	// The bounds of the service's own servers; the write timeout leaves
	// room for latency faults that hold a request for a while.
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      5 * time.Minute,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	stop = func(ctx context.Context) error {
		shutdownErr := srv.Shutdown(ctx)
		if shutdownErr != nil {
			// ctx ended with requests still held (e.g. by a latency
			// fault): cut them off.
			_ = srv.Close()
		}
		if serveErr := <-done; serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
			return errors.Join(shutdownErr, serveErr)
		}
		return shutdownErr
	}
	return "http://" + ln.Addr().String(), stop, nil
}

// ServeHTTP answers one request: the /_fake/ control endpoints, or the
// Stripe API under /v1/.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	requestID := newID("req")
	w.Header().Set("Request-Id", requestID)
	if strings.HasPrefix(r.URL.Path, controlPrefix) {
		s.serveControl(w, r)
		return
	}
	c := &call{
		s:         s,
		w:         w,
		r:         r,
		requestID: requestID,
		idemKey:   strings.TrimSpace(r.Header.Get("Idempotency-Key")),
		started:   time.Now(),
	}
	c.rec = s.journal.begin(Request{
		ID:             c.requestID,
		Method:         r.Method,
		Path:           r.URL.Path,
		IdempotencyKey: c.idemKey,
		At:             s.Now(),
	})
	s.serveAPI(c)
}

// call is the state of one API request as it moves through the pipeline.
type call struct {
	s         *Server
	w         http.ResponseWriter
	r         *http.Request
	rec       *Request
	requestID string
	secret    string
	op        string
	pathID    string
	params    url.Values
	idemKey   string
	started   time.Time
}

// serveAPI runs the pipeline: authentication, routing, parameter parsing,
// front-end faults, the idempotency layer, latency, execution (or a refusal
// fault in its place), and the faults that lose the answer.
func (s *Server) serveAPI(c *call) {
	secret, ok := secretKey(c.r)
	if !ok {
		c.finish(errorResponse(http.StatusUnauthorized, apiError{
			Type: typeInvalidRequest,
			Message: "You did not provide an API key. You need to provide your API key in the Authorization header, " +
				"using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').",
		}), false)
		return
	}
	c.secret = secret

	rt, pathID, ok := route(c.r.Method, c.r.URL.Path)
	if !ok {
		c.finish(errorResponse(http.StatusNotFound, apiError{
			Type:    typeInvalidRequest,
			Message: "Unrecognized request URL (" + c.r.Method + ": " + c.r.URL.Path + ").",
		}), false)
		return
	}
	c.op, c.pathID = rt.op, pathID
	s.journal.update(c.rec, func(r *Request) { r.Op = rt.op })
	if s.outage.Load() {
		c.finish(outageResponse(c), false)
		return
	}

	if err := c.r.ParseForm(); err != nil {
		c.finish(errorResponse(http.StatusBadRequest, apiError{
			Type:    typeInvalidRequest,
			Message: "Invalid request body: " + err.Error(),
		}), false)
		return
	}
	c.params = c.r.Form

	if f, ok := s.faults.takeFront(c.op); ok {
		s.journal.update(c.rec, func(r *Request) { r.Fault = f.Kind })
		if !f.notify(c.r.Context()) {
			s.journal.update(c.rec, func(r *Request) { r.Dropped = true })
			return
		}
		if f.Kind == FaultDropBefore {
			c.drop()
			return
		}
		c.finish(f.response(), false)
		return
	}

	claim, answered := c.admit()
	if answered {
		return
	}

	held, ok := s.faults.delay(c.r.Context(), c.op)
	if held {
		s.journal.update(c.rec, func(r *Request) { r.Fault = FaultLatency })
	}
	if !ok {
		// The client went away while the request was held back; the
		// operation never started, so the key is free again.
		if claim != nil {
			s.idem.abandon(claim)
		}
		s.journal.update(c.rec, func(r *Request) { r.Dropped = true })
		s.logRequest(c, 0, false)
		return
	}

	var resp response
	if f, ok := s.faults.takeRefuse(c.op); ok {
		s.journal.update(c.rec, func(r *Request) { r.Fault = FaultRefuse })
		if !f.notify(c.r.Context()) {
			if claim != nil {
				s.idem.abandon(claim)
			}
			s.journal.update(c.rec, func(r *Request) { r.Dropped = true })
			return
		}
		resp = f.response()
		resp.executed = true // a refusal is an outcome: saved under the key
	} else {
		resp = rt.handle(c)
	}
	if claim != nil {
		if resp.executed {
			s.idem.complete(claim, savedResponse{status: resp.status, body: resp.body, requestID: c.requestID})
		} else {
			s.idem.abandon(claim)
		}
	}
	if f, ok := s.faults.takeDropAfter(c.op); ok {
		s.journal.update(c.rec, func(r *Request) { r.Fault = FaultDropAfter })
		f.notify(c.r.Context())
		c.drop()
		return
	}
	c.finish(resp, false)
}

// admit runs the idempotency layer. A POST with a key either gets a saved
// response replayed, a conflict, or claims the key for this execution (the
// returned claim, to complete or abandon). Other requests pass unclaimed.
// answered reports that the request has been answered.
func (c *call) admit() (claim *idempotencyEntry, answered bool) {
	if c.r.Method != http.MethodPost || c.idemKey == "" {
		return nil, false
	}
	if len(c.idemKey) > maxIdempotencyKeyLen {
		c.finish(errorResponse(http.StatusBadRequest, apiError{
			Type:    typeInvalidRequest,
			Message: "Invalid Idempotency-Key header: keys can be at most 255 characters long.",
		}), false)
		return nil, true
	}
	outcome, entry, saved := c.s.idem.claim(idempotencyScope{secret: c.secret, key: c.idemKey},
		c.r.Method, c.r.URL.Path, c.params.Encode(), c.s.Now())
	switch outcome {
	case claimReplay:
		c.replay(saved)
		return nil, true
	case claimInFlight:
		c.finish(errorResponse(http.StatusConflict, apiError{
			Type: typeInvalidRequest,
			Code: "idempotency_key_in_use",
			Message: "There is currently another in-progress request using this Stripe token (probably " +
				"from the same idempotency key). Please try again later.",
		}), false)
		return nil, true
	case claimOtherEndpoint:
		c.finish(errorResponse(http.StatusBadRequest, apiError{
			Type: typeIdempotency,
			Message: "Keys for idempotent requests can only be used for the same endpoint they were first " +
				"used for ('" + entry.method + " " + entry.path + "'). Try using a key other than '" +
				c.idemKey + "' if you meant to execute a different request.",
		}), false)
		return nil, true
	case claimOtherParams:
		c.finish(errorResponse(http.StatusBadRequest, apiError{
			Type: typeIdempotency,
			Message: "Keys for idempotent requests can only be used with the same parameters they were " +
				"first used with. Try using a key other than '" + c.idemKey +
				"' if you meant to execute a different request.",
		}), false)
		return nil, true
	case claimExecute:
		return entry, false
	}
	return nil, false
}

// finish writes resp and records its status.
func (c *call) finish(resp response, replayed bool) {
	h := c.w.Header()
	h.Set("Content-Type", "application/json")
	if c.idemKey != "" && c.r.Method == http.MethodPost {
		h.Set("Idempotency-Key", c.idemKey)
	}
	c.w.WriteHeader(resp.status)
	_, _ = c.w.Write(resp.body)
	c.s.journal.update(c.rec, func(r *Request) { r.Status = resp.status; r.Replayed = replayed })
	c.s.logRequest(c, resp.status, replayed)
}

// replay answers with a saved response, byte for byte.
func (c *call) replay(saved savedResponse) {
	h := c.w.Header()
	h.Set("Idempotent-Replayed", "true")
	h.Set("Original-Request", saved.requestID)
	c.finish(response{status: saved.status, body: saved.body}, true)
}

// drop closes the connection without answering.
func (c *call) drop() {
	c.s.journal.update(c.rec, func(r *Request) { r.Dropped = true })
	c.s.logRequest(c, 0, false)
	if hj, ok := c.w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	// HTTP/2 or a wrapped writer: abort the response instead.
	panic(http.ErrAbortHandler)
}

func (s *Server) logRequest(c *call, status int, replayed bool) {
	s.log.LogAttrs(c.r.Context(), slog.LevelInfo, "fakestripe request",
		slog.String("request_id", c.requestID),
		slog.String("method", c.r.Method),
		slog.String("path", c.r.URL.Path),
		slog.String("op", c.op),
		slog.String("idempotency_key", c.idemKey),
		slog.Int("status", status),
		slog.Bool("replayed", replayed),
		slog.Duration("duration", time.Since(c.started)),
	)
}

// secretKey extracts the API key from Bearer or Basic authentication (Stripe
// accepts both); any non-empty key is valid.
func secretKey(r *http.Request) (string, bool) {
	auth := r.Header.Get("Authorization")
	if key, ok := strings.CutPrefix(auth, "Bearer "); ok {
		key = strings.TrimSpace(key)
		return key, key != ""
	}
	if user, _, ok := r.BasicAuth(); ok && user != "" {
		return user, true
	}
	return "", false
}
