package fakestripe

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Error codes of PaymentIntent operations.
const (
	codeAuthenticationRequired = "authentication_required"
	codeAuthenticationFailure  = "payment_intent_authentication_failure"
	codeUnexpectedState        = "payment_intent_unexpected_state"
)

// cancellationReasons are the reasons a cancel request may give.
var cancellationReasons = []string{"duplicate", "fraudulent", "requested_by_customer", "abandoned"}

// paymentMethod is what a PaymentIntent is confirmed with: a card of its
// customer (card_…) or a test payment method (pm_…), and how it behaves.
type paymentMethod struct {
	id   string
	card cardBehaviour
}

// paymentMethodLocked resolves id for a PaymentIntent of cust (nil when it
// has none): cust's own card, or any pm_ payment method, whose behaviour
// follows from its name (pm_card_authenticationRequired…).
func (l *ledger) paymentMethodLocked(cust *Customer, id string) (paymentMethod, bool) {
	if strings.HasPrefix(id, "card_") {
		if cust != nil && cust.Card == id {
			return paymentMethod{id: id, card: cust.cardBehaviour()}, true
		}
		return paymentMethod{}, false
	}
	if hasAnyPrefix(id, []string{"pm_"}) {
		return paymentMethod{id: id, card: behaviourOf(id)}, true
	}
	return paymentMethod{}, false
}

// paymentIntentCreate is POST /v1/payment_intents: a PaymentIntent,
// confirmed at once when confirm=true. Without payment_method a confirmed
// PaymentIntent pays with the customer's default card, as Stripe does for
// integrations moving from the Charges API.
func (c *call) paymentIntentCreate() response {
	if bad, ok := rejectUnknown(c.params, "amount", "currency", "customer", "payment_method", "confirm",
		"off_session", "return_url", "capture_method", "description", "metadata", "payment_method_types",
		"expand"); ok {
		return bad
	}
	amount, currency, bad, ok := amountParams(c.params)
	if !ok {
		return bad
	}
	captureMethod, bad, ok := captureMethodParam(c.params)
	if !ok {
		return bad
	}
	confirm, _, bad, ok := boolParam(c.params, "confirm")
	if !ok {
		return bad
	}
	offSession, offSessionGiven, bad, ok := offSessionParam(c.params)
	if !ok {
		return bad
	}
	returnURL := c.params.Get("return_url")
	if !confirm {
		if offSessionGiven {
			return invalidParam("", "off_session", "off_session may only be given when confirm is true.")
		}
		if returnURL != "" {
			return invalidParam("", "return_url", "return_url may only be given when confirm is true.")
		}
	}
	if bad, ok := checkReturnURL(returnURL); !ok {
		return bad
	}
	types := listParam(c.params, "payment_method_types")
	if len(types) == 0 {
		types = []string{"card"}
	}

	l := &c.s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	var cust *Customer
	if id := c.params.Get("customer"); id != "" {
		if cust, ok = l.customerLocked(id); !ok {
			return noSuchObject(http.StatusBadRequest, "customer", "customer", id)
		}
	}
	var pm paymentMethod
	hasMethod := false
	if id := c.params.Get("payment_method"); id != "" {
		if pm, ok = l.paymentMethodLocked(cust, id); !ok {
			return noSuchObject(http.StatusBadRequest, "PaymentMethod", "payment_method", id)
		}
		hasMethod = true
	}
	if confirm {
		if !hasMethod {
			if pm, ok = defaultMethod(cust); !ok {
				return missingPaymentMethod(cust)
			}
			hasMethod = true
		}
		if bad, ok := requireReturnURL(pm, offSession, returnURL); !ok {
			return bad
		}
	}

	pi := &PaymentIntent{
		ID:                 l.newIDLocked("pi"),
		Amount:             amount,
		Currency:           currency,
		Description:        c.params.Get("description"),
		Status:             PaymentIntentRequiresPaymentMethod,
		CaptureMethod:      captureMethod,
		PaymentMethodTypes: types,
		Metadata:           metadataParams(c.params),
		Created:            c.s.Now(),
	}
	pi.ClientSecret = pi.ID + "_secret_" + randomString(24)
	if cust != nil {
		pi.Customer = cust.ID
	}
	if hasMethod {
		pi.PaymentMethod = pm.id
		pi.Status = PaymentIntentRequiresConfirmation
	}
	l.addPaymentIntentLocked(pi)
	c.s.emit("payment_intent.created", pi.object())
	if !confirm {
		return okResponse(pi.object())
	}
	return c.confirmLocked(pi, pm, offSession, returnURL)
}

// paymentIntentRetrieve is GET /v1/payment_intents/{id}.
func (c *call) paymentIntentRetrieve() response {
	if bad, ok := rejectUnknown(c.params, "client_secret", "expand"); ok {
		return bad
	}
	l := &c.s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	pi, ok := l.paymentIntentLocked(c.pathID)
	if !ok {
		return noSuchPaymentIntent(http.StatusNotFound, c.pathID)
	}
	return okResponse(pi.object())
}

// paymentIntentList is GET /v1/payment_intents: the PaymentIntents, newest
// first, of one customer when customer is given, within a created range
// when one is given.
func (c *call) paymentIntentList() response {
	if bad, ok := rejectUnknown(c.params, "customer", "created", "limit", "starting_after", "expand"); ok {
		return bad
	}
	created, bad, ok := c.parseCreated()
	if !ok {
		return bad
	}
	customer := c.params.Get("customer")
	l := &c.s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	var found []*PaymentIntent
	for _, pi := range l.paymentIntents {
		if (customer == "" || pi.Customer == customer) && created.match(pi.Created) {
			found = append(found, pi)
		}
	}
	return listPage(c, "/v1/payment_intents", "payment_intent", found,
		func(pi *PaymentIntent) string { return pi.ID }, func(pi *PaymentIntent) any { return pi.object() })
}

// paymentIntentConfirm is POST /v1/payment_intents/{id}/confirm, for a
// PaymentIntent that requires a payment method or a confirmation: with the
// payment method given, else the one it has, else its customer's default
// card. A PaymentIntent whose payment failed is confirmed again this way.
func (c *call) paymentIntentConfirm() response {
	if bad, ok := rejectUnknown(c.params, "payment_method", "off_session", "return_url", "capture_method", "expand"); ok {
		return bad
	}
	offSession, _, bad, ok := offSessionParam(c.params)
	if !ok {
		return bad
	}
	returnURL := c.params.Get("return_url")
	if bad, ok := checkReturnURL(returnURL); !ok {
		return bad
	}
	captureMethod := ""
	if c.params.Get("capture_method") != "" {
		if captureMethod, bad, ok = captureMethodParam(c.params); !ok {
			return bad
		}
	}

	l := &c.s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	pi, ok := l.paymentIntentLocked(c.pathID)
	if !ok {
		return noSuchPaymentIntent(http.StatusNotFound, c.pathID)
	}
	if pi.Status != PaymentIntentRequiresPaymentMethod && pi.Status != PaymentIntentRequiresConfirmation {
		return unexpectedState(pi, fmt.Sprintf("You cannot confirm this PaymentIntent because it has a status of %s. "+
			"Only a PaymentIntent with a status of requires_payment_method or requires_confirmation may be confirmed.",
			pi.Status))
	}
	cust, _ := l.customerLocked(pi.Customer)
	var pm paymentMethod
	switch id := c.params.Get("payment_method"); {
	case id != "":
		if pm, ok = l.paymentMethodLocked(cust, id); !ok {
			return noSuchObject(http.StatusBadRequest, "PaymentMethod", "payment_method", id)
		}
	case pi.PaymentMethod != "":
		if pm, ok = l.paymentMethodLocked(cust, pi.PaymentMethod); !ok {
			return missingPaymentMethod(cust)
		}
	default:
		if pm, ok = defaultMethod(cust); !ok {
			return missingPaymentMethod(cust)
		}
	}
	if returnURL == "" {
		returnURL = pi.ReturnURL
	}
	if bad, ok := requireReturnURL(pm, offSession, returnURL); !ok {
		return bad
	}
	if captureMethod != "" {
		pi.CaptureMethod = captureMethod
	}
	return c.confirmLocked(pi, pm, offSession, returnURL)
}

// paymentIntentCancel is POST /v1/payment_intents/{id}/cancel. Cancelling
// a PaymentIntent that requires capture releases its charge's hold, which
// Stripe shows as a refund of the capturable amount (releaseHoldLocked).
func (c *call) paymentIntentCancel() response {
	if bad, ok := rejectUnknown(c.params, "cancellation_reason", "expand"); ok {
		return bad
	}
	reason := c.params.Get("cancellation_reason")
	if reason != "" && !slices.Contains(cancellationReasons, reason) {
		return invalidParam("", "cancellation_reason", "Invalid cancellation_reason: must be one of "+
			strings.Join(cancellationReasons, ", ")+".")
	}

	l := &c.s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	pi, ok := l.paymentIntentLocked(c.pathID)
	if !ok {
		return noSuchPaymentIntent(http.StatusNotFound, c.pathID)
	}
	switch pi.Status {
	case PaymentIntentRequiresPaymentMethod, PaymentIntentRequiresConfirmation,
		PaymentIntentRequiresAction, PaymentIntentRequiresCapture:
	default:
		return unexpectedState(pi, fmt.Sprintf("You cannot cancel this PaymentIntent because it has a status of %s. "+
			"Only a PaymentIntent with one of the following statuses may be canceled: requires_payment_method, "+
			"requires_capture, requires_confirmation, requires_action, processing.", pi.Status))
	}
	if pi.Status == PaymentIntentRequiresCapture {
		ch, ok := l.chargeLocked(pi.LatestCharge)
		if !ok {
			// A PaymentIntent requires capture only once its charge is made.
			panic("fakestripe: payment intent " + pi.ID + " requires capture without a charge")
		}
		c.s.releaseHoldLocked(pi, ch, "")
		c.s.emit("charge.refunded", ch.object())
	}
	pi.Status = PaymentIntentCanceled
	pi.CancellationReason = reason
	pi.CanceledAt = c.s.Now()
	pi.ChallengeURL = ""
	c.s.emit("payment_intent.canceled", pi.object())
	return okResponse(pi.object())
}

// paymentIntentCapture is POST /v1/payment_intents/{id}/capture: captures
// amount_to_capture (all of amount_capturable by default) of a
// PaymentIntent that requires capture; the rest is released, counted in
// the charge's amount_refunded as Stripe counts it.
func (c *call) paymentIntentCapture() response {
	if bad, ok := rejectUnknown(c.params, "amount_to_capture", "final_capture", "metadata", "expand"); ok {
		return bad
	}
	amount, present, bad, ok := intParam(c.params, "amount_to_capture")
	switch {
	case !ok:
		return bad
	case present && amount < 1:
		return invalidParam("parameter_invalid_integer", "amount_to_capture", "This value must be greater than or equal to 1.")
	}
	final, finalGiven, bad, ok := boolParam(c.params, "final_capture")
	switch {
	case !ok:
		return bad
	case finalGiven && !final:
		return invalidParam("", "final_capture", "Capturing a PaymentIntent more than once is not available: "+
			"final_capture must be true.")
	}

	l := &c.s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	pi, ok := l.paymentIntentLocked(c.pathID)
	if !ok {
		return noSuchPaymentIntent(http.StatusNotFound, c.pathID)
	}
	switch pi.Status {
	case PaymentIntentRequiresCapture:
	case PaymentIntentSucceeded:
		return unexpectedState(pi, "This PaymentIntent could not be captured because it has already been captured.")
	default:
		return unexpectedState(pi, fmt.Sprintf("This PaymentIntent could not be captured because it has a status of %s. "+
			"Only a PaymentIntent with a status of requires_capture may be captured.", pi.Status))
	}
	if !present {
		amount = pi.AmountCapturable
	}
	if amount > pi.AmountCapturable {
		return executedError(http.StatusBadRequest, apiError{
			Type:  typeInvalidRequest,
			Code:  "amount_too_large",
			Param: "amount_to_capture",
			Message: fmt.Sprintf("The amount to capture (%d) is greater than the amount capturable (%d).",
				amount, pi.AmountCapturable),
		})
	}
	ch, ok := l.chargeLocked(pi.LatestCharge)
	if !ok {
		// A PaymentIntent requires capture only once its charge is made.
		panic("fakestripe: payment intent " + pi.ID + " requires capture without a charge")
	}
	rest := pi.AmountCapturable - amount
	ch.Uncaptured = false
	ch.AmountReleased = rest
	ch.AmountRefunded += rest
	ch.Refunded = ch.AmountRefunded == ch.Amount
	maps.Copy(pi.Metadata, metadataParams(c.params))
	pi.AmountReceived, pi.AmountCapturable = amount, 0
	pi.Status = PaymentIntentSucceeded
	c.s.emit("charge.captured", ch.object())
	c.s.emit("payment_intent.succeeded", pi.object())
	return okResponse(pi.object())
}

// releaseHoldLocked releases the uncaptured hold of ch, pi's charge, as
// Stripe documents it: the capturable amount is "automatically refunded",
// so the release shows on the charge as refunded in full (amount_refunded,
// refunded) and as a refund object of its own, made by Stripe (no metadata
// of the caller; reason, when not empty, is Stripe's own:
// RefundReasonExpired for a lapsed hold). It moves no money: the refund is
// marked Release and carries no balance transaction. The caller emits
// charge.refunded. s.ledger.mu must be held.
func (s *Server) releaseHoldLocked(pi *PaymentIntent, ch *Charge, reason string) {
	amount := ch.Amount - ch.AmountRefunded
	ch.AmountReleased = ch.Amount
	ch.AmountRefunded, ch.Refunded = ch.Amount, true
	pi.AmountCapturable = 0
	if amount <= 0 {
		return
	}
	s.ledger.addRefundLocked(&Refund{
		ID:            s.ledger.newIDLocked("re"),
		Charge:        ch.ID,
		Amount:        amount,
		Currency:      ch.Currency,
		Status:        "succeeded",
		Metadata:      map[string]string{},
		Created:       s.Now(),
		PaymentIntent: pi.ID,
		Reason:        reason,
		Release:       true,
	})
}

// confirmLocked confirms pi with pm, whose return URL check has passed:
// the card is charged, declined, or its bank asks for authentication
// (requires_action on-session, authentication_required off-session).
// c.s.ledger.mu must be held.
func (c *call) confirmLocked(pi *PaymentIntent, pm paymentMethod, offSession bool, returnURL string) response {
	s := c.s
	pi.PaymentMethod, pi.LastPaymentError, pi.ChallengeURL = pm.id, nil, ""
	if returnURL != "" {
		pi.ReturnURL = returnURL
	}
	switch {
	case pm.card.fails:
		s.declineLocked(pi, PaymentError{Type: typeCard, Code: "card_declined", DeclineCode: "generic_decline",
			Message: declineMessage}, true)
		return paymentFailed(pi)
	case pm.card.authenticate && offSession:
		s.declineLocked(pi, PaymentError{Type: typeCard, Code: codeAuthenticationRequired,
			DeclineCode: codeAuthenticationRequired, Message: authenticationRequiredMessage}, true)
		return paymentFailed(pi)
	case pm.card.authenticate:
		pi.Status = PaymentIntentRequiresAction
		pi.ChallengeURL = c.challengeURL(pi.ID)
		s.emit("payment_intent.requires_action", pi.object())
		return okResponse(pi.object())
	}
	s.payLocked(pi)
	return okResponse(pi.object())
}

// payLocked makes pi's charge with its payment method, which succeeds:
// pi succeeds, or requires capture when its capture method is manual.
// s.ledger.mu must be held.
func (s *Server) payLocked(pi *PaymentIntent) {
	ch := s.intentChargeLocked(pi)
	ch.Status, ch.Paid = ChargeSucceeded, true
	ch.Uncaptured = pi.CaptureMethod == CaptureManual
	s.ledger.addChargeLocked(ch)
	pi.LatestCharge = ch.ID
	s.emit("charge.succeeded", ch.object())
	if ch.Uncaptured {
		pi.Status, pi.AmountCapturable = PaymentIntentRequiresCapture, pi.Amount
		s.emit("payment_intent.amount_capturable_updated", pi.object())
		return
	}
	pi.Status, pi.AmountReceived = PaymentIntentSucceeded, pi.Amount
	s.emit("payment_intent.succeeded", pi.object())
}

// declineLocked records that pi's payment failed with e: a failed charge
// when withCharge (a decline by the bank; a failed authentication makes
// none), and pi back in requires_payment_method with e as its
// last_payment_error, naming the payment method, which pi no longer has.
// s.ledger.mu must be held.
func (s *Server) declineLocked(pi *PaymentIntent, e PaymentError, withCharge bool) {
	e.PaymentMethod = pi.PaymentMethod
	if withCharge {
		ch := s.intentChargeLocked(pi)
		ch.Status, ch.Paid = ChargeFailed, false
		ch.FailureCode, ch.DeclineCode, ch.FailureMessage = e.Code, e.DeclineCode, e.Message
		s.ledger.addChargeLocked(ch)
		pi.LatestCharge, e.Charge = ch.ID, ch.ID
		s.emit("charge.failed", ch.object())
	}
	pi.Status, pi.PaymentMethod, pi.ChallengeURL = PaymentIntentRequiresPaymentMethod, "", ""
	pi.LastPaymentError = &e
	s.emit("payment_intent.payment_failed", pi.object())
}

// intentChargeLocked is a new charge of pi, not yet recorded: it carries
// pi's description and a copy of its metadata.
func (s *Server) intentChargeLocked(pi *PaymentIntent) *Charge {
	return &Charge{
		ID:            s.ledger.newIDLocked("ch"),
		Customer:      pi.Customer,
		Amount:        pi.Amount,
		Currency:      pi.Currency,
		Description:   pi.Description,
		Metadata:      maps.Clone(metadataOrEmpty(pi.Metadata)),
		Created:       s.Now(),
		PaymentIntent: pi.ID,
	}
}

// paymentFailed is the 402 of a confirmation whose payment failed: the
// PaymentIntent's last_payment_error, with the PaymentIntent as it is now.
func paymentFailed(pi *PaymentIntent) response {
	e := pi.LastPaymentError
	obj := pi.object()
	return executedError(http.StatusPaymentRequired, apiError{
		Type:          e.Type,
		Code:          e.Code,
		DeclineCode:   e.DeclineCode,
		Message:       e.Message,
		Charge:        e.Charge,
		DocURL:        docURL(e.Code),
		PaymentIntent: &obj,
		PaymentMethod: pi.paymentMethodObject(e.PaymentMethod),
	})
}

// unexpectedState is the 400 for an operation pi's status does not allow,
// with pi in the error.
func unexpectedState(pi *PaymentIntent, message string) response {
	obj := pi.object()
	return executedError(http.StatusBadRequest, apiError{
		Type:          typeInvalidRequest,
		Code:          codeUnexpectedState,
		Message:       message,
		DocURL:        docURL(codeUnexpectedState),
		PaymentIntent: &obj,
	})
}

func noSuchPaymentIntent(status int, id string) response {
	return noSuchObject(status, "payment_intent", "intent", id)
}

// defaultMethod is cust's default card, if it has one.
func defaultMethod(cust *Customer) (paymentMethod, bool) {
	if cust == nil || cust.Card == "" {
		return paymentMethod{}, false
	}
	return paymentMethod{id: cust.Card, card: cust.cardBehaviour()}, true
}

// missingPaymentMethod is the 400 for a confirmation with nothing to pay
// with.
func missingPaymentMethod(cust *Customer) response {
	message := "You cannot confirm this PaymentIntent because it has no payment method: give payment_method."
	if cust != nil {
		message = "You cannot confirm this PaymentIntent because it has no payment method and customer " +
			cust.ID + " has no default card: give payment_method."
	}
	return executedError(http.StatusBadRequest, apiError{
		Type:    typeInvalidRequest,
		Code:    "parameter_missing",
		Param:   "payment_method",
		Message: message,
	})
}

// requireReturnURL answers 400 when pm needs authentication on-session and
// there is no return URL to send the rider back to.
func requireReturnURL(pm paymentMethod, offSession bool, returnURL string) (response, bool) {
	if !pm.card.authenticate || offSession || returnURL != "" {
		return response{}, true
	}
	return executedError(http.StatusBadRequest, apiError{
		Type:  typeInvalidRequest,
		Code:  "parameter_missing",
		Param: "return_url",
		Message: "This payment method requires the customer to authenticate on a page of their bank: " +
			"give return_url, where they are sent back to afterwards.",
	}), false
}

// checkReturnURL validates a return_url given: an absolute http(s) URL.
func checkReturnURL(raw string) (response, bool) {
	if raw == "" {
		return response{}, true
	}
	if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalidParam("url_invalid", "return_url", "Not a valid URL: "+raw), false
	}
	return response{}, true
}

// captureMethodParam reads capture_method: automatic (the default, also
// for automatic_async) or manual.
func captureMethodParam(params url.Values) (string, response, bool) {
	switch v := params.Get("capture_method"); v {
	case "", CaptureAutomatic, "automatic_async":
		return CaptureAutomatic, response{}, true
	case CaptureManual:
		return CaptureManual, response{}, true
	default:
		return "", invalidParam("", "capture_method",
			"Invalid capture_method: must be one of automatic, automatic_async or manual."), false
	}
}

// offSessionParam reads off_session: a boolean, or one_off and recurring,
// which mean true.
func offSessionParam(params url.Values) (offSession, present bool, bad response, ok bool) {
	switch v := params.Get("off_session"); v {
	case "":
		return false, false, response{}, true
	case "true", "one_off", "recurring":
		return true, true, response{}, true
	case "false":
		return false, true, response{}, true
	default:
		return false, true, invalidParam("", "off_session", "Invalid off_session: must be a boolean, one_off or recurring."), false
	}
}
