package fakeadyen

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// The control API: the fake's own endpoints under /_fake/, outside Adyen's
// API, for a harness that runs the fake as a process of its own (the
// fakeadyen command) and must read its ledger and make it misbehave from
// outside:
//
//	GET    /_fake/ledger   stored cards, payments, refunds, the journal of API requests, the outage switch
//	GET    /_fake/faults   the faults still active
//	POST   /_fake/faults   inject one fault, or an array: {"op":"payment","kind":"status","status":503,"times":3}
//	DELETE /_fake/faults   clear every fault
//	POST   /_fake/outage   {"on":true}: every API request answers 503 unexecuted until {"on":false}
//	POST   /_fake/reset    forget everything (ledger, keys, faults, outage, journal)
//	POST   /_fake/authenticate   {"reference":"…","complete":true}: answer the authentication the payment
//	                             under that merchant reference waits for, as its shopper would; answers
//	                             {"redirectResult":"…"} (404: none waits under it, 409: already answered)
//	GET    /_fake/challenge/{id} the challenge page of a payment waiting for authentication (an HTML page
//	                             for the shopper's browser, no API key): buttons #complete and #fail
//	POST   /_fake/challenge/{id} its forms: action=complete or action=fail; 303 to the payment's returnUrl
//	                             with redirectResult appended, 409 when no longer waiting
//
// A fault's duration is a Go duration string ("1.5s"); op is one of
// store, payment, refund, details, cancel, capture or "*".
const controlPrefix = "/_fake/"

// ServeHTTP answers one request: a control endpoint, or an API request,
// which is journalled with its answer.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, controlPrefix) {
		s.serveControl(w, r)
		return
	}
	op, _, _ := route(r)
	s.mu.Lock()
	outage := s.outage
	s.mu.Unlock()
	rec := &recorder{ResponseWriter: w}
	at := time.Now().UTC()
	defer func() {
		// A dropped connection panics out of the handler (ErrAbortHandler)
		// when it cannot be hijacked; journal it all the same.
		s.journal.add(Request{Op: op, Status: rec.status, Dropped: rec.dropped || rec.status == 0,
			Outage: outage && rec.status == http.StatusServiceUnavailable, At: at})
	}()
	s.serveAPI(rec, r)
}

// Ledger is the fake's state as GET /_fake/ledger shows it.
type Ledger struct {
	StoredCards []LedgerCard    `json:"stored_cards"`
	Payments    []LedgerPayment `json:"payments"`
	Refunds     []LedgerRefund  `json:"refunds"`
	// Modifications are the cancels and captures.
	Modifications []LedgerModification `json:"modifications"`
	Requests      []Request            `json:"requests"`
	Outage        bool                 `json:"outage"`
}

// LedgerCard is a stored card in the ledger.
type LedgerCard struct {
	ID               string    `json:"id"`
	ShopperReference string    `json:"shopper_reference"`
	Created          time.Time `json:"created"`
}

// LedgerPayment is a payment in the ledger, authorised or not.
type LedgerPayment struct {
	PSPReference     string `json:"psp_reference"`
	Reference        string `json:"reference"`
	ShopperReference string `json:"shopper_reference"`
	StoredCardID     string `json:"stored_card_id"`
	AmountValue      int64  `json:"amount_value"`
	Currency         string `json:"currency"`
	// ResultCode is Authorised, Refused, RedirectShopper (waiting for
	// authentication) or Cancelled.
	ResultCode        string            `json:"result_code"`
	RefusalReason     string            `json:"refusal_reason,omitempty"`
	RefusalReasonCode string            `json:"refusal_reason_code,omitempty"`
	Metadata          map[string]string `json:"metadata"`
	IdempotencyKey    string            `json:"idempotency_key"`
	Created           time.Time         `json:"created"`

	ShopperInteraction string `json:"shopper_interaction,omitempty"`
	ReturnURL          string `json:"return_url,omitempty"`
	ManualCapture      bool   `json:"manual_capture,omitempty"`
	CapturedValue      int64  `json:"captured_value,omitempty"`
	// ChallengeID and ChallengeURL: the challenge page of a payment that
	// needed authentication; RedirectResult, once it was answered.
	ChallengeID    string `json:"challenge_id,omitempty"`
	ChallengeURL   string `json:"challenge_url,omitempty"`
	RedirectResult string `json:"redirect_result,omitempty"`
}

// LedgerRefund is a refund in the ledger.
type LedgerRefund struct {
	PSPReference        string    `json:"psp_reference"`
	PaymentPSPReference string    `json:"payment_psp_reference"`
	AmountValue         int64     `json:"amount_value"`
	Currency            string    `json:"currency"`
	Reference           string    `json:"reference"`
	Created             time.Time `json:"created"`
}

// LedgerModification is a cancel or a capture in the ledger, with its
// outcome.
type LedgerModification struct {
	PSPReference        string    `json:"psp_reference"`
	Kind                string    `json:"kind"`
	PaymentPSPReference string    `json:"payment_psp_reference,omitempty"`
	PaymentReference    string    `json:"payment_reference,omitempty"`
	Reference           string    `json:"reference,omitempty"`
	AmountValue         int64     `json:"amount_value"`
	Currency            string    `json:"currency,omitempty"`
	Success             bool      `json:"success"`
	Reason              string    `json:"reason,omitempty"`
	Created             time.Time `json:"created"`
}

// Snapshot returns the ledger, the journal and the outage switch.
func (s *Server) Snapshot() Ledger {
	l := Ledger{StoredCards: []LedgerCard{}, Payments: []LedgerPayment{}, Refunds: []LedgerRefund{},
		Modifications: []LedgerModification{}, Requests: s.journal.list()}
	for _, c := range s.StoredCards() {
		l.StoredCards = append(l.StoredCards, LedgerCard{ID: c.ID, ShopperReference: c.ShopperReference, Created: c.Created})
	}
	for _, p := range s.Payments() {
		l.Payments = append(l.Payments, LedgerPayment{
			PSPReference: p.PSPReference, Reference: p.Reference, ShopperReference: p.ShopperReference,
			StoredCardID: p.StoredCardID, AmountValue: p.AmountValue, Currency: p.Currency, ResultCode: p.ResultCode,
			RefusalReason: p.RefusalReason, Metadata: p.Metadata, IdempotencyKey: p.IdempotencyKey, Created: p.Created,
			RefusalReasonCode: p.RefusalReasonCode, ShopperInteraction: p.ShopperInteraction, ReturnURL: p.ReturnURL,
			ManualCapture: p.ManualCapture, CapturedValue: p.CapturedValue, ChallengeID: p.ChallengeID,
			ChallengeURL: p.ChallengeURL, RedirectResult: p.RedirectResult,
		})
	}
	for _, r := range s.Refunds() {
		l.Refunds = append(l.Refunds, LedgerRefund{PSPReference: r.PSPReference, PaymentPSPReference: r.PaymentPSPReference,
			AmountValue: r.AmountValue, Currency: r.Currency, Reference: r.Reference, Created: r.Created})
	}
	for _, m := range s.Modifications() {
		l.Modifications = append(l.Modifications, LedgerModification{PSPReference: m.PSPReference, Kind: m.Kind,
			PaymentPSPReference: m.PaymentPSPReference, PaymentReference: m.PaymentReference, Reference: m.Reference,
			AmountValue: m.AmountValue, Currency: m.Currency, Success: m.Success, Reason: m.Reason, Created: m.Created})
	}
	if l.Requests == nil {
		l.Requests = []Request{}
	}
	s.mu.Lock()
	l.Outage = s.outage
	s.mu.Unlock()
	return l
}

// Faults returns the faults still active, in injection order, with Times
// holding the firings left (0: until cleared).
func (s *Server) Faults() []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Fault, len(s.faults))
	for i, f := range s.faults {
		out[i] = *f
	}
	return out
}

// faultJSON is the wire form of a Fault.
type faultJSON struct {
	Op       string    `json:"op"`
	Kind     FaultKind `json:"kind"`
	Status   int       `json:"status,omitempty"`
	Duration string    `json:"duration,omitempty"`
	Times    int       `json:"times,omitempty"`
}

// MarshalJSON encodes f with Duration as a Go duration string.
func (f Fault) MarshalJSON() ([]byte, error) {
	w := faultJSON{Op: f.Op, Kind: f.Kind, Status: f.Status, Times: f.Times}
	if f.Duration != 0 {
		w.Duration = f.Duration.String()
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes f with Duration as a Go duration string.
func (f *Fault) UnmarshalJSON(b []byte) error {
	var w faultJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*f = Fault{Op: w.Op, Kind: w.Kind, Status: w.Status, Times: w.Times}
	if w.Duration != "" {
		d, err := time.ParseDuration(w.Duration)
		if err != nil {
			return fmt.Errorf("fault duration: %w", err)
		}
		f.Duration = d
	}
	return nil
}

// Validate reports whether f is a fault the server can apply.
func (f Fault) Validate() error {
	switch f.Op {
	case OpStore, OpPayment, OpRefund, OpDetails, OpCancel, OpCapture, OpAny:
	default:
		return fmt.Errorf("fault: unknown op %q (want %s, %s, %s, %s, %s, %s or %q)", f.Op,
			OpStore, OpPayment, OpRefund, OpDetails, OpCancel, OpCapture, OpAny)
	}
	if f.Times < 0 {
		return errors.New("fault: times must not be negative")
	}
	switch f.Kind {
	case FaultStatus:
		if f.Status < 400 || f.Status > 599 {
			return fmt.Errorf("fault: status %d is not an error status", f.Status)
		}
	case FaultLatency:
		if f.Duration <= 0 {
			return errors.New("fault: latency needs a positive duration")
		}
	case FaultDropBefore, FaultDropAfter, FaultRefuse:
	default:
		return fmt.Errorf("fault: unknown kind %q", f.Kind)
	}
	return nil
}

func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) {
	if id, ok := strings.CutPrefix(r.URL.Path, challengePath); ok {
		s.serveChallenge(w, r, id)
		return
	}
	switch r.Method + " " + strings.TrimPrefix(r.URL.Path, controlPrefix) {
	case "GET ledger":
		controlJSON(w, http.StatusOK, s.Snapshot())
	case "GET faults":
		controlJSON(w, http.StatusOK, map[string][]Fault{"faults": s.Faults()})
	case "POST faults":
		faults, err := decodeFaults(r.Body)
		if err != nil {
			controlJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		for _, f := range faults {
			s.Inject(f)
		}
		controlJSON(w, http.StatusOK, map[string][]Fault{"faults": s.Faults()})
	case "DELETE faults":
		s.ClearFaults()
		controlJSON(w, http.StatusOK, map[string][]Fault{"faults": {}})
	case "POST outage":
		var body struct {
			On *bool `json:"on"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<10)).Decode(&body); err != nil || body.On == nil {
			controlJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"on": true} or {"on": false}`})
			return
		}
		s.SetOutage(*body.On)
		controlJSON(w, http.StatusOK, map[string]bool{"outage": *body.On})
	case "POST notifications":
		var ep NotificationEndpoint
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<12)).Decode(&ep); err != nil || ep.URL == "" || ep.HMACKey == "" {
			controlJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"url": "…", "hmac_key": "<hex>", …}`})
			return
		}
		s.SetNotificationEndpoint(&ep)
		controlJSON(w, http.StatusOK, map[string]string{"url": ep.URL})
	case "GET notifications":
		controlJSON(w, http.StatusOK, map[string]any{"items": len(s.NotificationItems()), "pending": s.notifier().pending.Load()})
	case "POST renotify":
		s.Renotify()
		controlJSON(w, http.StatusOK, map[string]int{"items": len(s.NotificationItems())})
	case "POST authenticate":
		s.serveAuthenticate(w, r)
	case "POST reset":
		s.Reset()
		s.journal.reset()
		controlJSON(w, http.StatusOK, map[string]bool{"reset": true})
	default:
		controlJSON(w, http.StatusNotFound, map[string]string{"error": "unknown control endpoint " + r.Method + " " + r.URL.Path})
	}
}

// decodeFaults reads one fault or an array of faults and validates them all
// before any is injected.
func decodeFaults(body io.Reader) ([]Fault, error) {
	raw, err := io.ReadAll(io.LimitReader(body, 1<<20))
	if err != nil {
		return nil, err
	}
	var faults []Fault
	if trimmed := strings.TrimSpace(string(raw)); strings.HasPrefix(trimmed, "[") {
		err = json.Unmarshal(raw, &faults)
	} else {
		var f Fault
		err = json.Unmarshal(raw, &f)
		faults = []Fault{f}
	}
	if err != nil {
		return nil, err
	}
	if len(faults) == 0 {
		return nil, errors.New("no fault given")
	}
	for _, f := range faults {
		if err := f.Validate(); err != nil {
			return nil, err
		}
	}
	return faults, nil
}

func controlJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
