package fakeadyen

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Operations, the targets of faults.
const (
	OpStore   = "store"
	OpPayment = "payment"
	OpRefund  = "refund"
	// OpDetails is POST /payments/details: the shopper's return from
	// authentication submitted.
	OpDetails = "details"
	// OpCancel is POST /cancels (by merchant reference) and POST
	// /payments/{pspReference}/cancels.
	OpCancel = "cancel"
	// OpCapture is POST /payments/{pspReference}/captures.
	OpCapture = "capture"
	OpAny     = "*"
)

// Result codes of a payment, as /payments and /payments/details answer
// them and Payment.ResultCode keeps them.
const (
	ResultAuthorised = "Authorised"
	ResultRefused    = "Refused"
	// ResultRedirectShopper is a payment waiting for its shopper to
	// authenticate on the challenge page.
	ResultRedirectShopper = "RedirectShopper"
	// ResultCancelled is a payment cancelled before it was decided, or an
	// authorisation cancelled before it was captured.
	ResultCancelled = "Cancelled"
)

// Shopper interactions of POST /payments.
const (
	// InteractionEcommerce is a payment with the shopper present (Adyen's
	// default when the request names none): the card's bank may ask the
	// shopper to authenticate.
	InteractionEcommerce = "Ecommerce"
	// InteractionContAuth is a payment the merchant makes with a stored
	// card, the shopper absent: a card that needs authentication is
	// refused.
	InteractionContAuth = "ContAuth"
)

// Test tokens (see the package doc).
const (
	TokenChargeDeclined                  = "tok_chargeDeclined"
	TokenChargeDeclinedInsufficientFunds = "tok_chargeDeclinedInsufficientFunds"
	TokenChargeCustomerFail              = "tok_chargeCustomerFail"

	// The cards whose bank asks the shopper to authenticate every payment
	// (3-D Secure): with the shopper present the payment waits on the
	// challenge page, without (ContAuth) it is refused.
	TokenAuthenticationRequired                = "tok_authenticationRequired"
	PaymentMethodAuthenticationRequired        = "pm_card_authenticationRequired"
	TokenAuthenticationRequiredOnSetup         = "tok_authenticationRequiredOnSetup"
	PaymentMethodAuthenticationRequiredOnSetup = "pm_card_authenticationRequiredOnSetup"
	TokenThreeDSecure2Required                 = "tok_threeDSecure2Required"
	PaymentMethodThreeDSecure2Required         = "pm_card_threeDSecure2Required"
	// The card that authenticates, then is refused for want of funds.
	TokenAuthenticationRequiredChargeDeclinedInsufficientFunds         = "tok_authenticationRequiredChargeDeclinedInsufficientFunds"
	PaymentMethodAuthenticationRequiredChargeDeclinedInsufficientFunds = "pm_card_authenticationRequiredChargeDeclinedInsufficientFunds"
)

// EncryptedCardPrefix starts the card data of Adyen's client-side
// encryption, which the fake accepts as a working card (and the fake Stripe
// does not know: a source only Adyen can store).
const EncryptedCardPrefix = "adyenjs_"

// TokenEncryptedAuthenticationRequired is encrypted card data (a source
// only Adyen can store) of a card whose bank asks for authentication, as
// TokenAuthenticationRequired.
const TokenEncryptedAuthenticationRequired = EncryptedCardPrefix + "authenticationRequired"

// KeyLifetime is how long the fake keeps an idempotency key by default:
// Adyen's documented minimum. After that, the key is new again.
const KeyLifetime = 31 * 24 * time.Hour

// Options configure a Server.
type Options struct {
	// Logger receives one line per request. Default: discarded.
	Logger *slog.Logger
	// KeyLifetime overrides the package's KeyLifetime (tests that need
	// Adyen to forget a key sooner). Zero: KeyLifetime.
	KeyLifetime time.Duration
	// PublicURL is the base URL browsers reach the server at, for the
	// challenge pages of payments waiting for authentication (PublicURL +
	// "/_fake/challenge/" + id). Empty: the scheme and Host of the
	// /payments request that made the payment.
	PublicURL string
}

// FaultKind is what a fault does.
type FaultKind string

const (
	// FaultStatus answers Status with an Adyen error body, executing
	// nothing and saving nothing.
	FaultStatus FaultKind = "status"
	// FaultDropBefore closes the connection without executing anything.
	FaultDropBefore FaultKind = "drop_before"
	// FaultDropAfter executes the operation, saves its answer under the
	// key, then closes the connection without answering.
	FaultDropAfter FaultKind = "drop_after"
	// FaultRefuse answers a payment with resultCode Refused, saved under
	// the key like a real answer.
	FaultRefuse FaultKind = "refuse"
	// FaultLatency holds the request for Duration before executing it.
	FaultLatency FaultKind = "latency"
)

// Fault makes the server misbehave for requests to Op, Times times (0:
// until cleared).
type Fault struct {
	Op       string
	Kind     FaultKind
	Status   int
	Duration time.Duration
	Times    int
}

// StoredCard is a card stored for a shopper.
type StoredCard struct {
	ID               string
	ShopperReference string
	Source           string
	Created          time.Time
}

// Payment is a payment in the ledger.
type Payment struct {
	PSPReference     string
	Reference        string
	ShopperReference string
	MerchantAccount  string
	StoredCardID     string
	AmountValue      int64
	Currency         string
	// ResultCode is the payment's state: ResultAuthorised,
	// ResultRefused, ResultRedirectShopper (waiting for authentication)
	// or ResultCancelled.
	ResultCode        string
	RefusalReason     string
	RefusalReasonCode string
	Metadata          map[string]string
	IdempotencyKey    string
	Created           time.Time

	// ShopperInteraction and Channel are the request's (an empty
	// interaction is InteractionEcommerce, as at Adyen).
	ShopperInteraction string
	Channel            string
	// ReturnURL is where the challenge page sends the shopper back.
	ReturnURL string
	// ManualCapture is additionalData.manualCapture "true": an
	// authorisation held until captured (POST .../captures) or cancelled.
	ManualCapture bool
	// CapturedValue is the amount captured of a manual-capture payment.
	CapturedValue int64
	// ChallengeID and ChallengeURL name the challenge page of a payment
	// that needed authentication (kept once it is answered).
	ChallengeID  string
	ChallengeURL string
	// RedirectResult is what the shopper came back with once the
	// challenge was answered: /payments/details takes it.
	RedirectResult string
}

// Authorised reports whether the payment took the money.
func (p Payment) Authorised() bool { return p.ResultCode == ResultAuthorised }

// AwaitingAuthentication reports whether the payment waits for its
// shopper on the challenge page.
func (p Payment) AwaitingAuthentication() bool { return p.ResultCode == ResultRedirectShopper }

// Refund is a refund in the ledger.
type Refund struct {
	PSPReference        string
	PaymentPSPReference string
	AmountValue         int64
	Currency            string
	Reference           string
	Created             time.Time
}

type saved struct {
	status   int
	body     []byte
	print    [32]byte
	at       time.Time
	inFlight bool
}

// Server is the fake. Use New; it is an http.Handler.
type Server struct {
	log *slog.Logger
	// publicURL is Options.PublicURL without a trailing slash.
	publicURL string
	// lifetime is how long a key is kept; offset is the sum of every
	// Advance, added to the wall clock (Now).
	lifetime time.Duration
	offset   atomic.Int64

	mu       sync.Mutex
	seq      int
	cards    map[string]*StoredCard
	payments []*Payment
	refunds  []*Refund
	// mods are the cancels and captures (modifications.go).
	mods []*Modification
	// challenges are the payments that needed authentication, by
	// challenge id; redirects the /payments/details answers, by
	// redirectResult (authentication.go).
	challenges map[string]*Payment
	redirects  map[string][]byte
	keys       map[string]*saved
	faults     []*Fault
	outage     bool
	requests   int
	journal    journal // control.go
	// notes sends the standard notifications (notify.go).
	notes notifier
}

// New returns an empty Server.
func New(opts Options) *Server {
	s := &Server{log: opts.Logger, lifetime: opts.KeyLifetime, publicURL: strings.TrimRight(opts.PublicURL, "/")}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.lifetime <= 0 {
		s.lifetime = KeyLifetime
	}
	s.Reset()
	return s
}

// Reset forgets everything: ledger, keys, faults, the outage.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cards, s.payments, s.refunds, s.keys, s.faults, s.outage, s.requests =
		map[string]*StoredCard{}, nil, nil, map[string]*saved{}, nil, false, 0
	s.mods, s.challenges, s.redirects = nil, map[string]*Payment{}, map[string][]byte{}
}

// KeyLifetime is how long the server remembers an idempotency key.
func (s *Server) KeyLifetime() time.Duration { return s.lifetime }

// Now is the server's current time: the wall clock plus every Advance. It
// judges keys' lifetimes and dates payments, refunds and notifications.
func (s *Server) Now() time.Time { return time.Now().Add(time.Duration(s.offset.Load())) }

// Advance moves the server's clock forward by d, e.g. past the lifetime
// of idempotency keys.
func (s *Server) Advance(d time.Duration) { s.offset.Add(int64(d)) }

// Inject adds a fault.
func (s *Server) Inject(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &f)
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// SetOutage switches the outage on (every API request answers 503 without
// executing) or off.
func (s *Server) SetOutage(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outage = on
}

// Payments returns every payment, authorised or not, oldest first.
func (s *Server) Payments() []Payment {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Payment, len(s.payments))
	for i, p := range s.payments {
		out[i] = *p
	}
	return out
}

// AuthorisedPayments returns the payments that took money.
func (s *Server) AuthorisedPayments() []Payment {
	var out []Payment
	for _, p := range s.Payments() {
		if p.Authorised() {
			out = append(out, p)
		}
	}
	return out
}

// Refunds returns every refund, oldest first.
func (s *Server) Refunds() []Refund {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Refund, len(s.refunds))
	for i, r := range s.refunds {
		out[i] = *r
	}
	return out
}

// StoredCards returns every stored card.
func (s *Server) StoredCards() []StoredCard {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]StoredCard, 0, len(s.cards))
	for _, c := range s.cards {
		out = append(out, *c)
	}
	return out
}

// Requests counts the API requests received.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Start serves s on addr until stop is called, and returns its base URL.
func (s *Server) Start(addr string) (baseURL string, stop func(ctx context.Context) error, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func(ctx context.Context) error {
		err := srv.Shutdown(ctx)
		if err != nil {
			_ = srv.Close()
		}
		if serveErr := <-done; serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
			return errors.Join(err, serveErr)
		}
		return err
	}, nil
}

// answer is one reply.
type answer struct {
	status int
	body   []byte
}

func jsonAnswer(status int, v any) answer {
	b, _ := json.Marshal(v)
	return answer{status: status, body: b}
}

func errorAnswer(status int, code, errType, msg string) answer {
	return jsonAnswer(status, map[string]any{"status": status, "errorCode": code, "message": msg, "errorType": errType})
}

// serveAPI answers one API request (ServeHTTP, control.go, routes the
// control endpoints and journals the rest).
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	op, pspRef, ok := route(r)
	if !ok {
		s.write(w, errorAnswer(http.StatusNotFound, "000", "validation", "no such endpoint"), "")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	s.mu.Lock()
	s.requests++
	outage := s.outage
	s.mu.Unlock()
	if r.Header.Get("X-API-Key") == "" {
		s.write(w, errorAnswer(http.StatusUnauthorized, "000", "security", "HTTP Status Response - Unauthorized"), "")
		return
	}
	if outage {
		s.write(w, errorAnswer(http.StatusServiceUnavailable, "000", "internal", "service unavailable (outage)"), "")
		return
	}
	key := r.Header.Get("Idempotency-Key")
	f := s.takeFault(op)
	if f != nil {
		switch f.Kind {
		case FaultStatus:
			s.write(w, errorAnswer(f.Status, "000", "internal", "injected fault"), key)
			return
		case FaultDropBefore:
			drop(w)
			return
		case FaultLatency:
			select {
			case <-time.After(f.Duration):
			case <-r.Context().Done():
				return
			}
		}
	}
	print := sha256.Sum256(append([]byte(r.URL.Path+"\n"), body...))
	if key != "" {
		s.mu.Lock()
		sv, found := s.keys[key]
		if found && s.Now().Sub(sv.at) > s.lifetime {
			found = false
		}
		switch {
		case found && sv.inFlight:
			s.mu.Unlock()
			s.write(w, errorAnswer(http.StatusConflict, "704", "validation", "request already processed or in progress"), key)
			return
		case found && sv.print != print:
			s.mu.Unlock()
			s.write(w, errorAnswer(http.StatusUnprocessableEntity, "704", "validation", "idempotency key already used with another request"), key)
			return
		case found:
			s.mu.Unlock()
			if f != nil && f.Kind == FaultDropAfter {
				drop(w)
				return
			}
			s.write(w, answer{status: sv.status, body: sv.body}, key)
			return
		}
		s.keys[key] = &saved{inFlight: true, print: print, at: s.Now()}
		s.mu.Unlock()
	}
	a := s.execute(op, pspRef, key, s.baseURL(r), body, f)
	if key != "" {
		s.mu.Lock()
		if a.status >= 500 {
			delete(s.keys, key)
		} else {
			s.keys[key] = &saved{status: a.status, body: a.body, print: print, at: s.Now()}
		}
		s.mu.Unlock()
	}
	if f != nil && f.Kind == FaultDropAfter {
		drop(w)
		return
	}
	s.write(w, a, key)
}

// route names the operation of r.
func route(r *http.Request) (op, pspRef string, ok bool) {
	if r.Method != http.MethodPost {
		return "", "", false
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// An optional version segment such as v71 comes first.
	if len(parts) > 0 && strings.HasPrefix(parts[0], "v") {
		parts = parts[1:]
	}
	switch {
	case len(parts) == 1 && parts[0] == "storedPaymentMethods":
		return OpStore, "", true
	case len(parts) == 1 && parts[0] == "payments":
		return OpPayment, "", true
	case len(parts) == 2 && parts[0] == "payments" && parts[1] == "details":
		return OpDetails, "", true
	case len(parts) == 1 && parts[0] == "cancels":
		return OpCancel, "", true
	case len(parts) == 3 && parts[0] == "payments" && parts[2] == "refunds":
		return OpRefund, parts[1], true
	case len(parts) == 3 && parts[0] == "payments" && parts[2] == "cancels":
		return OpCancel, parts[1], true
	case len(parts) == 3 && parts[0] == "payments" && parts[2] == "captures":
		return OpCapture, parts[1], true
	}
	return "", "", false
}

func (s *Server) takeFault(op string) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if f.Op != op && f.Op != OpAny {
			continue
		}
		got := *f
		if f.Times > 0 {
			f.Times--
			if f.Times == 0 {
				s.faults = append(s.faults[:i], s.faults[i+1:]...)
			}
		}
		return &got
	}
	return nil
}

func (s *Server) write(w http.ResponseWriter, a answer, key string) {
	w.Header().Set("Content-Type", "application/json")
	if key != "" {
		w.Header().Set("Idempotency-Key", key)
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// drop closes the connection without an answer.
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// newRef draws the next pspReference-like id; mu is held.
func (s *Server) newRef() string {
	s.seq++
	return fmt.Sprintf("FAKE%012d", s.seq)
}

func sourceWorks(src string) bool {
	for _, p := range []string{"tok_", "pm_", "card_", "src_", EncryptedCardPrefix} {
		if strings.HasPrefix(src, p) {
			return src != TokenChargeDeclined && src != TokenChargeDeclinedInsufficientFunds
		}
	}
	return false
}

// request is the body of any API request: each operation reads its own
// fields, and unknown fields are ignored.
type request struct {
	MerchantAccount  string `json:"merchantAccount"`
	ShopperReference string `json:"shopperReference"`
	Reference        string `json:"reference"`
	Amount           struct {
		Currency string `json:"currency"`
		Value    int64  `json:"value"`
	} `json:"amount"`
	PaymentMethod struct {
		Type                  string `json:"type"`
		StoredPaymentMethodID string `json:"storedPaymentMethodId"`
		EncryptedCardNumber   string `json:"encryptedCardNumber"`
	} `json:"paymentMethod"`
	ShopperInteraction       string            `json:"shopperInteraction"`
	RecurringProcessingModel string            `json:"recurringProcessingModel"`
	Channel                  string            `json:"channel"`
	ReturnURL                string            `json:"returnUrl"`
	Metadata                 map[string]string `json:"metadata"`
	// AdditionalData is a map of strings at Adyen; other JSON values
	// (manualCapture: true) are taken as their text.
	AdditionalData map[string]any `json:"additionalData"`
	// Details is what /payments/details submits.
	Details struct {
		RedirectResult string `json:"redirectResult"`
	} `json:"details"`
	// PaymentReference names the payment POST /cancels cancels.
	PaymentReference string `json:"paymentReference"`
}

// additional returns additionalData[name] as text.
func (req *request) additional(name string) string {
	switch v := req.AdditionalData[name].(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		return fmt.Sprint(v)
	}
}

// execute performs one operation; base is the URL browsers reach the
// server at.
func (s *Server) execute(op, pspRef, key, base string, body []byte, f *Fault) answer {
	var req request
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return errorAnswer(http.StatusBadRequest, "702", "validation", "Structure of the request is invalid")
	}
	// /payments/details names no merchant account: the redirectResult
	// names the payment.
	if req.MerchantAccount == "" && op != OpDetails {
		return errorAnswer(http.StatusForbidden, "901", "security", "Invalid Merchant Account")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now().UTC()
	switch op {
	case OpStore:
		if req.ShopperReference == "" {
			return errorAnswer(http.StatusUnprocessableEntity, "130", "validation", "Required field 'shopperReference' is not provided.")
		}
		if !sourceWorks(req.PaymentMethod.EncryptedCardNumber) {
			return errorAnswer(http.StatusUnprocessableEntity, "101", "validation", "Invalid card number")
		}
		c := &StoredCard{ID: "SPM" + s.newRef(), ShopperReference: req.ShopperReference, Source: req.PaymentMethod.EncryptedCardNumber, Created: now}
		s.cards[c.ID] = c
		return jsonAnswer(http.StatusOK, map[string]any{"id": c.ID, "shopperReference": c.ShopperReference, "type": "scheme", "merchantAccount": req.MerchantAccount})
	case OpPayment:
		return s.payLocked(&req, key, base, f, now)
	case OpDetails:
		return s.detailsLocked(&req)
	case OpCancel:
		return s.cancelRequestLocked(&req, pspRef, now)
	case OpCapture:
		return s.captureRequestLocked(&req, pspRef, now)
	case OpRefund:
		var pay *Payment
		for _, p := range s.payments {
			if p.PSPReference == pspRef && p.Authorised() {
				pay = p
			}
		}
		if pay == nil {
			return errorAnswer(http.StatusUnprocessableEntity, "167", "validation", "Original pspReference required for this operation")
		}
		var refunded int64
		for _, r := range s.refunds {
			if r.PaymentPSPReference == pspRef {
				refunded += r.AmountValue
			}
		}
		if req.Amount.Value <= 0 || refunded+req.Amount.Value > pay.AmountValue {
			return errorAnswer(http.StatusUnprocessableEntity, "137", "validation", "Invalid amount specified")
		}
		r := &Refund{PSPReference: s.newRef(), PaymentPSPReference: pspRef, AmountValue: req.Amount.Value,
			Currency: req.Amount.Currency, Reference: req.Reference, Created: now}
		s.refunds = append(s.refunds, r)
		s.notifyRefund(r, req.MerchantAccount)
		return jsonAnswer(http.StatusCreated, map[string]any{"pspReference": r.PSPReference, "paymentPspReference": pspRef,
			"status": "received", "reference": r.Reference, "merchantAccount": req.MerchantAccount,
			"amount": map[string]any{"currency": r.Currency, "value": r.AmountValue}})
	}
	return errorAnswer(http.StatusNotFound, "000", "validation", "no such endpoint")
}

// payLocked makes a payment with a stored card (POST /payments); mu is
// held. A card that needs authentication leaves the payment waiting for
// its shopper (RedirectShopper, answered without a pspReference) when the
// shopper is present, and refuses it when not.
func (s *Server) payLocked(req *request, key, base string, f *Fault, now time.Time) answer {
	if req.Amount.Value <= 0 || req.Amount.Currency == "" || req.Reference == "" {
		return errorAnswer(http.StatusUnprocessableEntity, "137", "validation", "Invalid amount or reference")
	}
	interaction := req.ShopperInteraction
	if interaction == "" {
		interaction = InteractionEcommerce
	}
	p := &Payment{
		PSPReference: s.newRef(), Reference: req.Reference, ShopperReference: req.ShopperReference,
		StoredCardID: req.PaymentMethod.StoredPaymentMethodID, AmountValue: req.Amount.Value,
		Currency: req.Amount.Currency, Metadata: req.Metadata, IdempotencyKey: key, Created: now,
		MerchantAccount:    req.MerchantAccount,
		ResultCode:         ResultAuthorised,
		ShopperInteraction: interaction, Channel: req.Channel, ReturnURL: req.ReturnURL,
		ManualCapture: strings.EqualFold(req.additional("manualCapture"), "true"),
	}
	card := s.cards[req.PaymentMethod.StoredPaymentMethodID]
	auth := authNone
	if card != nil {
		auth = authenticationOf(card.Source)
	}
	switch {
	case card == nil || card.ShopperReference != req.ShopperReference:
		return errorAnswer(http.StatusUnprocessableEntity, "800", "validation", "Contract not found")
	case f != nil && f.Kind == FaultRefuse, card.Source == TokenChargeCustomerFail:
		p.ResultCode, p.RefusalReason, p.RefusalReasonCode = ResultRefused, "Refused", "2"
	case auth != authNone && interaction == InteractionEcommerce:
		if req.ReturnURL == "" {
			return errorAnswer(http.StatusUnprocessableEntity, "130", "validation", "Required field 'returnUrl' is not provided.")
		}
		return s.challengeLocked(p, base)
	case auth != authNone:
		p.ResultCode, p.RefusalReason, p.RefusalReasonCode = ResultRefused, reasonAuthenticationRequired, codeAuthenticationRequired
	}
	s.payments = append(s.payments, p)
	s.notifyPayment(p)
	return jsonAnswer(http.StatusOK, outcomeOf(p))
}

// outcomeOf is the answer of a decided payment, as /payments and
// /payments/details give it.
func outcomeOf(p *Payment) map[string]any {
	out := map[string]any{"pspReference": p.PSPReference, "resultCode": p.ResultCode, "merchantReference": p.Reference,
		"amount": map[string]any{"currency": p.Currency, "value": p.AmountValue}}
	if p.RefusalReason != "" {
		out["refusalReason"], out["refusalReasonCode"] = p.RefusalReason, p.RefusalReasonCode
	}
	return out
}
