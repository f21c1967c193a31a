package fakeadyen

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/atomicrides/atomicrides/internal/fake/challenge"
)

// 3-D Secure: a payment with the shopper present (Ecommerce) and a card
// whose bank asks for authentication is not decided by POST /payments.
// Its answer is RedirectShopper with a redirect action to the challenge
// page, which stands in for the bank's; the shopper completes or fails the
// authentication there, the payment is decided (and its AUTHORISATION
// notified), and the browser goes back to the payment's returnUrl with a
// redirectResult, which POST /payments/details exchanges for the outcome.

// authentication is what a card's bank asks of a payment.
type authentication int

const (
	// authNone: no authentication; the payment is decided at once.
	authNone authentication = iota
	// authThenPay: authentication, then the payment is authorised.
	authThenPay
	// authThenDecline: authentication, then the payment is refused for
	// want of funds.
	authThenDecline
)

// authenticationOf is what the bank of the card stored from src asks.
func authenticationOf(src string) authentication {
	switch src {
	case TokenAuthenticationRequired, PaymentMethodAuthenticationRequired,
		TokenAuthenticationRequiredOnSetup, PaymentMethodAuthenticationRequiredOnSetup,
		TokenThreeDSecure2Required, PaymentMethodThreeDSecure2Required, TokenEncryptedAuthenticationRequired:
		return authThenPay
	case TokenAuthenticationRequiredChargeDeclinedInsufficientFunds,
		PaymentMethodAuthenticationRequiredChargeDeclinedInsufficientFunds:
		return authThenDecline
	}
	return authNone
}

// Refusals of payments that needed authentication: Adyen's refusalReason
// and refusalReasonCode.
const (
	reasonAuthenticationRequired = "Authentication required"
	codeAuthenticationRequired   = "38"
	reasonNotAuthenticated       = "3D Not Authenticated"
	codeNotAuthenticated         = "11"
	reasonNotEnoughBalance       = "Not enough balance"
	codeNotEnoughBalance         = "12"
)

// challengePath is where the challenge page of a payment lives, under the
// control prefix: GET shows it, POST with action=complete or action=fail
// answers it.
const challengePath = controlPrefix + "challenge/"

var (
	errNoPendingPayment          = errors.New("no payment waiting for authentication")
	errNotAwaitingAuthentication = errors.New("payment is not waiting for authentication")
)

// baseURL is the URL browsers reach the server at: Options.PublicURL, else
// the scheme and Host r came to.
func (s *Server) baseURL(r *http.Request) string {
	if s.publicURL != "" {
		return s.publicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// newToken draws an opaque random token.
func newToken() string { return rand.Text() }

// challengeLocked records p as waiting for its shopper's authentication
// and returns the RedirectShopper answer; mu is held. The payment has its
// pspReference already, but the answer does not tell it: Adyen reveals it
// with the outcome.
func (s *Server) challengeLocked(p *Payment, base string) answer {
	p.ResultCode = ResultRedirectShopper
	p.ChallengeID = strings.ToLower(newToken())
	p.ChallengeURL = base + challengePath + p.ChallengeID
	s.payments = append(s.payments, p)
	s.challenges[p.ChallengeID] = p
	return jsonAnswer(http.StatusOK, map[string]any{
		"resultCode": p.ResultCode, "merchantReference": p.Reference,
		"action": map[string]any{"type": "redirect", "method": http.MethodGet, "url": p.ChallengeURL, "paymentMethodType": "scheme"},
	})
}

// Authenticate answers the authentication that the payment made under
// merchantReference waits for, as its shopper does on the challenge page:
// complete authorises it (or has it refused "Not enough balance", for the
// card that declines once authenticated), !complete refuses it "3D Not
// Authenticated". Either way its AUTHORISATION is notified. It returns the
// redirectResult the shopper's browser is sent back with, for POST
// /payments/details. It is an error when no payment under that reference
// waits for authentication.
func (s *Server) Authenticate(merchantReference string, complete bool) (redirectResult string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var found *Payment
	for _, p := range s.payments {
		if p.Reference != merchantReference || p.ChallengeID == "" {
			continue
		}
		if found == nil || !found.AwaitingAuthentication() {
			found = p
		}
	}
	switch {
	case found == nil:
		return "", fmt.Errorf("fakeadyen: %w under reference %q", errNoPendingPayment, merchantReference)
	case !found.AwaitingAuthentication():
		return "", fmt.Errorf("fakeadyen: %w: the payment under reference %q is %s", errNotAwaitingAuthentication, merchantReference, found.ResultCode)
	}
	s.decideLocked(found, complete)
	return found.RedirectResult, nil
}

// PendingChallenges returns the payments waiting for their shopper's
// authentication, oldest first: each ResultRedirectShopper, with its
// ChallengeID, ChallengeURL and ReturnURL.
func (s *Server) PendingChallenges() []Payment {
	var out []Payment
	for _, p := range s.Payments() {
		if p.AwaitingAuthentication() {
			out = append(out, p)
		}
	}
	return out
}

// decideLocked decides the payment p, which waits for authentication, as
// its shopper answered the challenge; mu is held. It saves the answer of
// /payments/details under a new redirectResult and notifies the
// AUTHORISATION.
func (s *Server) decideLocked(p *Payment, complete bool) {
	auth := authThenPay
	if card := s.cards[p.StoredCardID]; card != nil {
		auth = authenticationOf(card.Source)
	}
	switch {
	case !complete:
		p.ResultCode, p.RefusalReason, p.RefusalReasonCode = ResultRefused, reasonNotAuthenticated, codeNotAuthenticated
	case auth == authThenDecline:
		p.ResultCode, p.RefusalReason, p.RefusalReasonCode = ResultRefused, reasonNotEnoughBalance, codeNotEnoughBalance
	default:
		p.ResultCode = ResultAuthorised
	}
	p.RedirectResult = newToken() + newToken()
	s.redirects[p.RedirectResult] = jsonAnswer(http.StatusOK, outcomeOf(p)).body
	s.notifyPayment(p)
}

// detailsLocked answers POST /payments/details: the outcome of the payment
// the redirectResult was issued for, the same however often it is asked;
// mu is held.
func (s *Server) detailsLocked(req *request) answer {
	rr := req.Details.RedirectResult
	if rr == "" {
		return errorAnswer(http.StatusUnprocessableEntity, "130", "validation", "Required field 'details.redirectResult' is not provided.")
	}
	body, ok := s.redirects[rr]
	if !ok {
		return errorAnswer(http.StatusUnprocessableEntity, "14_018", "validation", "Invalid redirectResult")
	}
	return answer{status: http.StatusOK, body: body}
}

// withRedirectResult is returnURL with redirectResult appended to its
// query (its own query and fragment kept).
func withRedirectResult(returnURL, redirectResult string) string {
	base, fragment, hasFragment := strings.Cut(returnURL, "#")
	switch {
	case !strings.Contains(base, "?"):
		base += "?"
	case !strings.HasSuffix(base, "?") && !strings.HasSuffix(base, "&"):
		base += "&"
	}
	out := base + "redirectResult=" + url.QueryEscape(redirectResult)
	if hasFragment {
		out += "#" + fragment
	}
	return out
}

// serveChallenge serves the challenge page id (the path after
// challengePath): GET shows it, POST answers it and sends the browser back
// to the payment's returnUrl (303).
func (s *Server) serveChallenge(w http.ResponseWriter, r *http.Request, id string) {
	w.Header().Set("Cache-Control", "no-store")
	s.mu.Lock()
	p := s.challenges[id]
	var view challengeView
	if p != nil {
		view = challengeView{Reference: p.Reference, Amount: formatAmount(p.AmountValue, p.Currency),
			Action: challengePath + p.ChallengeID, State: p.ResultCode}
	}
	pending := p != nil && p.AwaitingAuthentication()
	s.mu.Unlock()
	if p == nil {
		writeMessage(w, http.StatusNotFound, "No such payment", "There is no payment waiting for authentication here.")
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if !pending {
			writeNotWaiting(w, view)
			return
		}
		challenge.Write(w, challenge.Page{
			Processor: "Adyen", Amount: view.Amount,
			Label: "Merchant reference", ID: view.Reference, IDElement: "reference", Action: view.Action,
		})
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			writeMessage(w, http.StatusBadRequest, "Bad request", err.Error())
			return
		}
		action := r.PostForm.Get("action")
		if action != "complete" && action != "fail" {
			writeMessage(w, http.StatusBadRequest, "Bad request", "action must be complete or fail.")
			return
		}
		s.mu.Lock()
		if !p.AwaitingAuthentication() {
			view.State = p.ResultCode
			s.mu.Unlock()
			writeNotWaiting(w, view)
			return
		}
		s.decideLocked(p, action == "complete")
		back := withRedirectResult(p.ReturnURL, p.RedirectResult)
		s.mu.Unlock()
		http.Redirect(w, r, back, http.StatusSeeOther)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeMessage(w, http.StatusMethodNotAllowed, "Method not allowed", r.Method+" is not allowed here.")
	}
}

// serveAuthenticate is POST /_fake/authenticate with {"reference": …,
// "complete": true|false}: Authenticate over HTTP, answered with
// {"redirectResult": …}.
func (s *Server) serveAuthenticate(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Reference string `json:"reference"`
		Complete  *bool  `json:"complete"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&body); err != nil || body.Reference == "" || body.Complete == nil {
		controlJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"reference": "…", "complete": true|false}`})
		return
	}
	rr, err := s.Authenticate(body.Reference, *body.Complete)
	switch {
	case errors.Is(err, errNoPendingPayment):
		controlJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
	case err != nil:
		controlJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
	default:
		controlJSON(w, http.StatusOK, map[string]string{"redirectResult": rr})
	}
}

func writeNotWaiting(w http.ResponseWriter, v challengeView) {
	writeMessage(w, http.StatusConflict, "Nothing to authenticate",
		"The payment "+v.Reference+" is not waiting for authentication: it is "+v.State+".")
}

type challengeView struct {
	Reference, Amount, Action, State string
}

// writeMessage answers with one of the challenge's short pages.
func writeMessage(w http.ResponseWriter, status int, title, message string) {
	challenge.WriteMessage(w, status, "Adyen", title, message)
}

// Currencies whose minor unit is not a hundredth, as Adyen counts them.
var (
	noDecimals    = []string{"CVE", "DJF", "GNF", "IDR", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "VND", "VUV", "XAF", "XOF", "XPF"}
	threeDecimals = []string{"BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"}
)

// formatAmount shows an amount in minor units as people read it, e.g.
// 1250 EUR as "12.50 EUR".
func formatAmount(value int64, currency string) string {
	code := strings.ToUpper(currency)
	switch {
	case slices.Contains(noDecimals, code):
		return strconv.FormatInt(value, 10) + " " + code
	case slices.Contains(threeDecimals, code):
		return fmt.Sprintf("%d.%03d %s", value/1000, value%1000, code)
	}
	return fmt.Sprintf("%d.%02d %s", value/100, value%100, code)
}
