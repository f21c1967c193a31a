package fakestripe

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/atomicrides/atomicrides/internal/fake/challenge"
)

// The challenge page stands in for the rider's bank: a PaymentIntent that
// requires action sends the rider to it (next_action.redirect_to_url.url),
// the rider completes or fails the authentication, and the page sends the
// browser back to the PaymentIntent's return_url, as Stripe does.

// challengePath is where the challenge page of a PaymentIntent lives,
// under the control prefix: GET shows it, POST with action=complete or
// action=fail answers it.
const challengePath = controlPrefix + "challenge/"

var (
	errNoSuchPaymentIntent       = errors.New("no such payment intent")
	errNotAwaitingAuthentication = errors.New("payment intent is not waiting for authentication")
)

// Authenticate answers the authentication a PaymentIntent in
// requires_action waits for, as the rider does on the challenge page:
// complete pays with its card (or has it declined, for the cards that
// decline once authenticated), !complete fails the authentication
// (payment_intent_authentication_failure). Either way the PaymentIntent
// moves on and its events are emitted. It is an error when the
// PaymentIntent does not exist or is not in requires_action.
func (s *Server) Authenticate(paymentIntentID string, complete bool) error {
	_, err := s.authenticate(paymentIntentID, complete)
	return err
}

func (s *Server) authenticate(id string, complete bool) (PaymentIntent, error) {
	l := &s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	pi, ok := l.paymentIntentLocked(id)
	if !ok {
		return PaymentIntent{}, fmt.Errorf("%w: %s", errNoSuchPaymentIntent, id)
	}
	if pi.Status != PaymentIntentRequiresAction {
		return pi.clone(), fmt.Errorf("%w: %s has a status of %s", errNotAwaitingAuthentication, id, pi.Status)
	}
	cust, _ := l.customerLocked(pi.Customer)
	pm, _ := l.paymentMethodLocked(cust, pi.PaymentMethod)
	pi.ChallengeURL = ""
	switch decline := pm.card.declineAfterAuthentication; {
	case !complete:
		s.declineLocked(pi, PaymentError{Type: typeInvalidRequest, Code: codeAuthenticationFailure,
			Message: authenticationFailedMessage}, false)
	case decline != "":
		s.declineLocked(pi, PaymentError{Type: typeCard, Code: "card_declined", DeclineCode: decline,
			Message: declineMessageOf(decline)}, true)
	default:
		s.payLocked(pi)
	}
	return pi.clone(), nil
}

// challengeURL is the challenge page of the PaymentIntent id: under
// Options.PublicURL, else under the host the request came to.
func (c *call) challengeURL(id string) string {
	base := c.s.publicURL
	if base == "" {
		scheme := "http"
		if c.r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + c.r.Host
	}
	return base + challengePath + id
}

// returnURL is where the challenge page sends the browser once pi's
// authentication is answered: pi's return_url, its own query kept, with
// payment_intent, payment_intent_client_secret and redirect_status
// (succeeded, or failed when pi needs another payment method) appended.
func (pi *PaymentIntent) returnURL() string {
	status := "failed"
	if pi.Status == PaymentIntentSucceeded || pi.Status == PaymentIntentRequiresCapture {
		status = "succeeded"
	}
	query := url.Values{
		"payment_intent":               {pi.ID},
		"payment_intent_client_secret": {pi.ClientSecret},
		"redirect_status":              {status},
	}.Encode()
	base, fragment, hasFragment := strings.Cut(pi.ReturnURL, "#")
	switch {
	case !strings.Contains(base, "?"):
		base += "?"
	case !strings.HasSuffix(base, "?") && !strings.HasSuffix(base, "&"):
		base += "&"
	}
	out := base + query
	if hasFragment {
		out += "#" + fragment
	}
	return out
}

// serveChallenge serves the challenge page of the PaymentIntent id.
func (s *Server) serveChallenge(w http.ResponseWriter, r *http.Request, id string) {
	w.Header().Set("Cache-Control", "no-store")
	pi, ok := s.PaymentIntent(id)
	if !ok || strings.Contains(id, "/") {
		writeChallengeMessage(w, http.StatusNotFound, "No such payment", "There is no PaymentIntent "+id+".")
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if pi.Status != PaymentIntentRequiresAction {
			writeNotWaiting(w, pi)
			return
		}
		challenge.Write(w, challenge.Page{
			Processor: "Stripe", Amount: formatAmount(pi.Amount, pi.Currency),
			Label: "PaymentIntent", ID: pi.ID, IDElement: "payment-intent", Action: challengePath + pi.ID,
		})
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			writeChallengeMessage(w, http.StatusBadRequest, "Bad request", err.Error())
			return
		}
		action := r.PostForm.Get("action")
		if action != "complete" && action != "fail" {
			writeChallengeMessage(w, http.StatusBadRequest, "Bad request", "action must be complete or fail.")
			return
		}
		pi, err := s.authenticate(id, action == "complete")
		if err != nil {
			writeNotWaiting(w, pi)
			return
		}
		if pi.ReturnURL == "" {
			writeChallengeMessage(w, http.StatusOK, "Authentication answered",
				"The payment is now "+pi.Status+". There is no return URL to go back to.")
			return
		}
		http.Redirect(w, r, pi.returnURL(), http.StatusSeeOther)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeChallengeMessage(w, http.StatusMethodNotAllowed, "Method not allowed", r.Method+" is not allowed here.")
	}
}

// serveAuthenticate is POST /_fake/payment_intents/{id}/authenticate with
// {"complete": true|false}: Authenticate over HTTP. It answers the
// PaymentIntent as the ledger records it.
func (s *Server) serveAuthenticate(w http.ResponseWriter, r *http.Request, id string) {
	var body struct {
		Complete *bool `json:"complete"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&body); err != nil || body.Complete == nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"complete": true} or {"complete": false}`})
		return
	}
	pi, err := s.authenticate(id, *body.Complete)
	switch {
	case errors.Is(err, errNoSuchPaymentIntent):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
	case err != nil:
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
	default:
		writeJSON(w, http.StatusOK, pi)
	}
}

func writeNotWaiting(w http.ResponseWriter, pi PaymentIntent) {
	writeChallengeMessage(w, http.StatusConflict, "Nothing to authenticate",
		"PaymentIntent "+pi.ID+" is not waiting for authentication: it has a status of "+pi.Status+".")
}

// writeChallengeMessage answers with one of the challenge's short pages.
func writeChallengeMessage(w http.ResponseWriter, status int, title, message string) {
	challenge.WriteMessage(w, status, "Stripe", title, message)
}

// zeroDecimal are the currencies whose amounts have no minor unit.
var zeroDecimal = []string{"bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd",
	"vuv", "xaf", "xof", "xpf"}

// formatAmount shows an amount in a currency's minor unit as people read
// it, e.g. 1250 eur as "12.50 EUR".
func formatAmount(amount int64, currency string) string {
	code := strings.ToUpper(currency)
	if slices.Contains(zeroDecimal, currency) {
		return strconv.FormatInt(amount, 10) + " " + code
	}
	return fmt.Sprintf("%d.%02d %s", amount/100, amount%100, code)
}

// ExpireHold lets the uncaptured hold of the PaymentIntent id lapse, as a
// card network does after its window: the PaymentIntent is canceled and its
// charge released in full, with a charge.expired event, the release shown
// as Stripe's own refund (reason RefundReasonExpired, charge.refunded), and
// payment_intent.canceled. POST /_fake/payment_intents/{id}/expire does it
// over HTTP.
func (s *Server) ExpireHold(id string) error {
	l := &s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	pi, ok := l.paymentIntentLocked(id)
	if !ok {
		return fmt.Errorf("%w: %s", errNoSuchPaymentIntent, id)
	}
	if pi.Status != PaymentIntentRequiresCapture {
		return fmt.Errorf("fakestripe: %s has a status of %s, not requires_capture", id, pi.Status)
	}
	ch, ok := l.chargeLocked(pi.LatestCharge)
	if !ok {
		return fmt.Errorf("fakestripe: %s has no charge", id)
	}
	s.releaseHoldLocked(pi, ch, RefundReasonExpired)
	pi.Status = PaymentIntentCanceled
	pi.CancellationReason = "automatic"
	pi.CanceledAt = s.Now()
	s.emit("charge.expired", ch.object())
	s.emit("charge.refunded", ch.object())
	s.emit("payment_intent.canceled", pi.object())
	return nil
}
