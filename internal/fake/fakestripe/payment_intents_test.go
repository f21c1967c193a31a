package fakestripe_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/paymentintent"
	"github.com/stripe/stripe-go/v76/refund"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
)

// The tests in this file drive the PaymentIntents API of the fake with
// stripe-go's own clients, as the adapter does, and the challenge page
// over HTTP, as a browser does.

const returnURL = "https://rides.example/book/return?key=ride-1"

// stripeClients are stripe-go's PaymentIntent and Refund clients pointed
// at the fake, without retries.
func (e *env) stripeClients() (paymentintent.Client, refund.Client) {
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(e.url),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		MaxNetworkRetries: stripe.Int64(0),
		EnableTelemetry:   stripe.Bool(false),
	})
	return paymentintent.Client{B: backend, Key: testKey}, refund.Client{B: backend, Key: testKey}
}

// intentParams is a PaymentIntent of 12.50 EUR for customer, confirmed
// with the rider present, under key.
func intentParams(key, customer string) *stripe.PaymentIntentParams {
	p := &stripe.PaymentIntentParams{
		Amount:             stripe.Int64(1250),
		Currency:           stripe.String("eur"),
		Customer:           stripe.String(customer),
		Confirm:            stripe.Bool(true),
		Description:        stripe.String("Ride"),
		PaymentMethodTypes: []*string{stripe.String("card")},
		ReturnURL:          stripe.String(returnURL),
	}
	p.SetIdempotencyKey(key)
	p.AddMetadata("ar_key", key)
	return p
}

// stripeErr asserts that err is a *stripe.Error with status and code.
func stripeErr(t *testing.T, err error, status int, code string) *stripe.Error {
	t.Helper()
	var se *stripe.Error
	require.True(t, errors.As(err, &se), "want *stripe.Error, got %T: %v", err, err)
	require.Equal(t, status, se.HTTPStatusCode, "error: %v", se)
	require.Equal(t, code, string(se.Code), "error: %v", se)
	return se
}

// eventTypes are the types of the events emitted so far, in order.
func eventTypes(s *fakestripe.Server) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Type)
	}
	return out
}

// chargeOf is the recorded charge id.
func chargeOf(t *testing.T, s *fakestripe.Server, id string) fakestripe.Charge {
	t.Helper()
	for _, ch := range s.Charges() {
		if ch.ID == id {
			return ch
		}
	}
	t.Fatalf("no charge %s", id)
	return fakestripe.Charge{}
}

// rawCharge is the charge id as GET /v1/charges/{id} answers it.
func rawCharge(t *testing.T, e *env, id string) map[string]any {
	t.Helper()
	res, body := e.get(t, "/v1/charges/"+id)
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	var ch map[string]any
	require.NoError(t, json.Unmarshal(body, &ch))
	return ch
}

func TestPaymentIntentWithWorkingCard(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	intents, _ := e.stripeClients()
	cus := customerID(t, e, "tok_visa")

	pi, err := intents.New(intentParams("ride-1-charge", cus))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(pi.ID, "pi_"), pi.ID)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, pi.Status)
	require.EqualValues(t, 1250, pi.Amount)
	require.EqualValues(t, 1250, pi.AmountReceived)
	require.Zero(t, pi.AmountCapturable)
	require.Equal(t, stripe.CurrencyEUR, pi.Currency)
	require.Equal(t, cus, pi.Customer.ID)
	require.Equal(t, stripe.PaymentIntentCaptureMethodAutomatic, pi.CaptureMethod)
	require.True(t, strings.HasPrefix(pi.ClientSecret, pi.ID+"_secret_"), pi.ClientSecret)
	require.Nil(t, pi.NextAction)
	require.Nil(t, pi.LastPaymentError)
	require.Equal(t, []string{"card"}, pi.PaymentMethodTypes)
	require.Equal(t, map[string]string{"ar_key": "ride-1-charge"}, pi.Metadata)
	require.NotNil(t, pi.LatestCharge)
	require.NotNil(t, pi.PaymentMethod, "paid with the customer's default card")
	require.Equal(t, e.fake.Customers()[0].Card, pi.PaymentMethod.ID)

	ch := chargeOf(t, e.fake, pi.LatestCharge.ID)
	require.Equal(t, pi.ID, ch.PaymentIntent)
	require.Equal(t, fakestripe.ChargeSucceeded, ch.Status)
	require.False(t, ch.Uncaptured)
	require.Equal(t, map[string]string{"ar_key": "ride-1-charge"}, ch.Metadata, "the charge carries the PaymentIntent's metadata")
	require.Equal(t, "Ride", ch.Description)
	wire := rawCharge(t, e, ch.ID)
	require.Equal(t, pi.ID, wire["payment_intent"])
	require.Equal(t, true, wire["captured"])
	require.Equal(t, float64(1250), wire["amount_captured"])

	got, err := intents.Get(pi.ID, nil)
	require.NoError(t, err)
	require.Equal(t, pi.ID, got.ID)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, got.Status)
	require.Equal(t, pi.ClientSecret, got.ClientSecret)

	_, err = intents.Get("pi_missing", nil)
	stripeErr(t, err, http.StatusNotFound, "resource_missing")

	recorded := e.fake.PaymentIntents()
	require.Len(t, recorded, 1)
	require.Equal(t, fakestripe.PaymentIntentSucceeded, recorded[0].Status)
	require.Equal(t, ch.ID, recorded[0].LatestCharge)
	require.Equal(t, recorded, e.fake.Snapshot().PaymentIntents)
	require.Equal(t, []string{"payment_intent.created", "charge.succeeded", "payment_intent.succeeded"}, eventTypes(e.fake))
}

func TestPaymentIntentDeclined(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	intents, _ := e.stripeClients()
	cus := customerID(t, e, fakestripe.TokenChargeCustomerFail)

	_, err := intents.New(intentParams("ride-1-charge", cus))
	se := stripeErr(t, err, http.StatusPaymentRequired, "card_declined")
	require.Equal(t, stripe.ErrorTypeCard, se.Type)
	require.Equal(t, stripe.DeclineCode("generic_decline"), se.DeclineCode)
	require.Equal(t, "Your card was declined.", se.Msg)
	require.NotNil(t, se.PaymentIntent, "the PaymentIntent comes with the error")
	pi := se.PaymentIntent
	require.True(t, strings.HasPrefix(pi.ID, "pi_"), pi.ID)
	require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, pi.Status)
	require.Nil(t, pi.PaymentMethod)
	require.NotNil(t, pi.LastPaymentError)
	require.Equal(t, stripe.ErrorCodeCardDeclined, pi.LastPaymentError.Code)
	require.Equal(t, stripe.DeclineCode("generic_decline"), pi.LastPaymentError.DeclineCode)
	require.Equal(t, stripe.ErrorTypeCard, pi.LastPaymentError.Type)
	require.NotNil(t, pi.LastPaymentError.PaymentMethod)
	card := e.fake.Customers()[0].Card
	require.Equal(t, card, pi.LastPaymentError.PaymentMethod.ID)
	require.Equal(t, card, se.PaymentMethod.ID)
	require.NotEmpty(t, se.ChargeID)
	require.Equal(t, se.ChargeID, pi.LastPaymentError.ChargeID)
	require.Equal(t, se.ChargeID, pi.LatestCharge.ID)

	ch := chargeOf(t, e.fake, se.ChargeID)
	require.Equal(t, fakestripe.ChargeFailed, ch.Status)
	require.Equal(t, pi.ID, ch.PaymentIntent)
	require.Empty(t, e.fake.SucceededCharges())
	require.Equal(t, []string{"payment_intent.created", "charge.failed", "payment_intent.payment_failed"}, eventTypes(e.fake))

	// The decline is the key's saved answer.
	_, err = intents.New(intentParams("ride-1-charge", cus))
	again := stripeErr(t, err, http.StatusPaymentRequired, "card_declined")
	require.Equal(t, pi.ID, again.PaymentIntent.ID)
	require.Len(t, e.fake.PaymentIntents(), 1)
	require.Len(t, e.fake.Charges(), 1)
}

func TestPaymentIntentAuthenticationCards(t *testing.T) {
	t.Parallel()
	for _, source := range []string{
		fakestripe.TokenAuthenticationRequired, fakestripe.PaymentMethodAuthenticationRequired,
		fakestripe.TokenAuthenticationRequiredOnSetup, fakestripe.PaymentMethodAuthenticationRequiredOnSetup,
		fakestripe.TokenThreeDSecure2Required, fakestripe.PaymentMethodThreeDSecure2Required,
		fakestripe.TokenAuthenticationRequiredChargeDeclinedInsufficientFunds,
		fakestripe.PaymentMethodAuthenticationRequiredChargeDeclinedInsufficientFunds,
	} {
		t.Run(source, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, fakestripe.Options{})
			intents, _ := e.stripeClients()
			cus := customerID(t, e, source)
			require.True(t, e.fake.Customers()[0].NeedsAuthentication)

			pi, err := intents.New(intentParams("ride-1-charge", cus))
			require.NoError(t, err)
			require.Equal(t, stripe.PaymentIntentStatusRequiresAction, pi.Status)
			require.True(t, strings.HasPrefix(pi.ClientSecret, pi.ID+"_secret_"), pi.ClientSecret)
			require.NotNil(t, pi.NextAction)
			require.Equal(t, stripe.PaymentIntentNextActionTypeRedirectToURL, pi.NextAction.Type)
			require.Equal(t, e.url+"/_fake/challenge/"+pi.ID, pi.NextAction.RedirectToURL.URL)
			require.Equal(t, returnURL, pi.NextAction.RedirectToURL.ReturnURL)
			require.Nil(t, pi.LatestCharge, "nothing is charged before the rider authenticates")
			require.Empty(t, e.fake.Charges())
			require.Equal(t, []string{"payment_intent.created", "payment_intent.requires_action"}, eventTypes(e.fake))

			// A test payment method named directly behaves the same.
			p := intentParams("ride-2-charge", cus)
			p.PaymentMethod = stripe.String(fakestripe.PaymentMethodAuthenticationRequired)
			direct, err := intents.New(p)
			require.NoError(t, err)
			require.Equal(t, stripe.PaymentIntentStatusRequiresAction, direct.Status)
			require.Equal(t, fakestripe.PaymentMethodAuthenticationRequired, direct.PaymentMethod.ID)
		})
	}
}

func TestPaymentIntentAuthenticationNeedsReturnURL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	intents, _ := e.stripeClients()
	cus := customerID(t, e, fakestripe.TokenAuthenticationRequired)

	p := intentParams("ride-1-charge", cus)
	p.ReturnURL = nil
	_, err := intents.New(p)
	se := stripeErr(t, err, http.StatusBadRequest, "parameter_missing")
	require.Equal(t, "return_url", se.Param)
	require.Empty(t, e.fake.PaymentIntents())

	// A working card needs none.
	visa := customerID(t, e, "tok_visa")
	p = intentParams("ride-2-charge", visa)
	p.ReturnURL = nil
	pi, err := intents.New(p)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, pi.Status)

	p = intentParams("ride-3-charge", visa)
	p.ReturnURL = stripe.String("not a url")
	_, err = intents.New(p)
	require.Equal(t, "return_url", stripeErr(t, err, http.StatusBadRequest, "url_invalid").Param)
}

func TestAuthenticateCompletes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	intents, _ := e.stripeClients()
	cus := customerID(t, e, fakestripe.TokenAuthenticationRequired)
	pi, err := intents.New(intentParams("ride-1-charge", cus))
	require.NoError(t, err)

	require.NoError(t, e.fake.Authenticate(pi.ID, true))
	got, err := intents.Get(pi.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, got.Status)
	require.Nil(t, got.NextAction)
	require.EqualValues(t, 1250, got.AmountReceived)
	require.NotNil(t, got.LatestCharge)
	charges := e.fake.SucceededCharges()
	require.Len(t, charges, 1)
	require.Equal(t, got.LatestCharge.ID, charges[0].ID)
	require.Equal(t, pi.ID, charges[0].PaymentIntent)
	require.Equal(t, map[string]string{"ar_key": "ride-1-charge"}, charges[0].Metadata)
	require.Equal(t, []string{"payment_intent.created", "payment_intent.requires_action",
		"charge.succeeded", "payment_intent.succeeded"}, eventTypes(e.fake))

	require.Error(t, e.fake.Authenticate(pi.ID, true), "nothing waits for authentication any more")
	require.Error(t, e.fake.Authenticate(pi.ID, false))
	require.Error(t, e.fake.Authenticate("pi_missing", true))
	require.Len(t, e.fake.Charges(), 1)
	require.Len(t, e.fake.Events(), 4)
}

func TestAuthenticateFailsThenTheRiderTriesAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	intents, _ := e.stripeClients()
	cus := customerID(t, e, fakestripe.TokenAuthenticationRequired)
	pi, err := intents.New(intentParams("ride-1-charge", cus))
	require.NoError(t, err)

	require.NoError(t, e.fake.Authenticate(pi.ID, false))
	got, err := intents.Get(pi.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, got.Status)
	require.Nil(t, got.NextAction)
	require.Nil(t, got.PaymentMethod)
	require.Nil(t, got.LatestCharge, "a failed authentication makes no charge")
	lpe := got.LastPaymentError
	require.NotNil(t, lpe)
	require.Equal(t, stripe.ErrorCodePaymentIntentAuthenticationFailure, lpe.Code)
	require.Empty(t, lpe.DeclineCode)
	require.NotEmpty(t, lpe.Msg)
	require.Equal(t, e.fake.Customers()[0].Card, lpe.PaymentMethod.ID)
	require.Empty(t, e.fake.Charges())
	require.Equal(t, "payment_intent.payment_failed", eventTypes(e.fake)[2])

	// The rider comes back: the same PaymentIntent, confirmed on-session
	// with the payment method that failed, asks again.
	again, err := intents.Confirm(pi.ID, &stripe.PaymentIntentConfirmParams{
		PaymentMethod: stripe.String(lpe.PaymentMethod.ID), ReturnURL: stripe.String(returnURL),
	})
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresAction, again.Status)
	require.Nil(t, again.LastPaymentError)
	require.NoError(t, e.fake.Authenticate(pi.ID, true))
	got, err = intents.Get(pi.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, got.Status)
	require.Len(t, e.fake.SucceededCharges(), 1)

	_, err = intents.Confirm(pi.ID, &stripe.PaymentIntentConfirmParams{})
	se := stripeErr(t, err, http.StatusBadRequest, "payment_intent_unexpected_state")
	require.Equal(t, pi.ID, se.PaymentIntent.ID)
}

func TestAuthenticatedThenDeclinedForInsufficientFunds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	intents, _ := e.stripeClients()
	cus := customerID(t, e, fakestripe.TokenAuthenticationRequiredChargeDeclinedInsufficientFunds)
	pi, err := intents.New(intentParams("ride-1-charge", cus))
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresAction, pi.Status)

	require.NoError(t, e.fake.Authenticate(pi.ID, true))
	got, err := intents.Get(pi.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, got.Status)
	require.Equal(t, stripe.ErrorCodeCardDeclined, got.LastPaymentError.Code)
	require.Equal(t, stripe.DeclineCode("insufficient_funds"), got.LastPaymentError.DeclineCode)
	require.Equal(t, "Your card has insufficient funds.", got.LastPaymentError.Msg)
	require.Equal(t, got.LatestCharge.ID, got.LastPaymentError.ChargeID)
	ch := chargeOf(t, e.fake, got.LatestCharge.ID)
	require.Equal(t, fakestripe.ChargeFailed, ch.Status)
	require.Equal(t, "insufficient_funds", ch.DeclineCode)
	require.Empty(t, e.fake.SucceededCharges())
	require.Equal(t, []string{"payment_intent.created", "payment_intent.requires_action",
		"charge.failed", "payment_intent.payment_failed"}, eventTypes(e.fake))
}

func TestOffSessionAuthenticationRequired(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	intents, _ := e.stripeClients()
	cus := customerID(t, e, fakestripe.TokenAuthenticationRequired)

	p := intentParams("ride-1-charge", cus)
	p.ReturnURL = nil
	p.OffSession = stripe.Bool(true)
	_, err := intents.New(p)
	se := stripeErr(t, err, http.StatusPaymentRequired, "authentication_required")
	require.Equal(t, stripe.ErrorTypeCard, se.Type)
	require.Equal(t, stripe.DeclineCode("authentication_required"), se.DeclineCode)
	pi := se.PaymentIntent
	require.NotNil(t, pi)
	require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, pi.Status, "not requires_action")
	require.Nil(t, pi.NextAction)
	require.Equal(t, e.fake.Customers()[0].Card, pi.LastPaymentError.PaymentMethod.ID)
	require.Equal(t, stripe.ErrorCodeAuthenticationRequired, pi.LastPaymentError.Code)
	require.Contains(t, eventTypes(e.fake), "payment_intent.payment_failed")
	require.NotContains(t, eventTypes(e.fake), "payment_intent.requires_action")
	require.Empty(t, e.fake.SucceededCharges())

	// The rider present, the same PaymentIntent asks for authentication.
	again, err := intents.Confirm(pi.ID, &stripe.PaymentIntentConfirmParams{
		PaymentMethod: stripe.String(pi.LastPaymentError.PaymentMethod.ID), ReturnURL: stripe.String(returnURL),
	})
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresAction, again.Status)

	// The Charges API cannot authenticate: the charge fails.
	res, body := e.post(t, "/v1/charges", testKey, "", chargeForm(cus, "500"))
	require.Equal(t, http.StatusPaymentRequired, res.StatusCode)
	legacy := decodeError(t, body)
	require.Equal(t, "card_error", legacy.Error.Type)
	require.Equal(t, "authentication_required", legacy.Error.Code)
	require.Equal(t, "authentication_required", legacy.Error.DeclineCode)
	ch := chargeOf(t, e.fake, legacy.Error.Charge)
	require.Equal(t, fakestripe.ChargeFailed, ch.Status)
	require.Empty(t, ch.PaymentIntent)
}

func TestPaymentIntentIdempotency(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	intents, _ := e.stripeClients()
	cus := customerID(t, e, fakestripe.TokenAuthenticationRequired)

	first, err := intents.New(intentParams("ride-1-charge", cus))
	require.NoError(t, err)
	second, err := intents.New(intentParams("ride-1-charge", cus))
	require.NoError(t, err)
	require.Equal(t, first.ID, second.ID)
	require.Equal(t, first.NextAction.RedirectToURL.URL, second.NextAction.RedirectToURL.URL)
	require.Len(t, e.fake.PaymentIntents(), 1)
	var creates []fakestripe.Request
	for _, r := range e.fake.Requests() {
		if r.Op == fakestripe.OpPaymentIntentCreate {
			creates = append(creates, r)
		}
	}
	require.Len(t, creates, 2)
	require.False(t, creates[0].Replayed)
	require.True(t, creates[1].Replayed)

	other := intentParams("ride-1-charge", cus)
	other.Amount = stripe.Int64(999)
	_, err = intents.New(other)
	var se *stripe.Error
	require.True(t, errors.As(err, &se), "err: %v", err)
	require.Equal(t, stripe.ErrorTypeIdempotency, se.Type)
	require.Equal(t, http.StatusBadRequest, se.HTTPStatusCode)
	require.Len(t, e.fake.PaymentIntents(), 1)
	require.Len(t, e.fake.Events(), 2, "replays emit nothing")
}

func TestPaymentIntentCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	intents, _ := e.stripeClients()
	visa := customerID(t, e, "tok_visa")
	sca := customerID(t, e, fakestripe.TokenThreeDSecure2Required)
	card := e.fake.Customers()[0].Card

	unconfirmed := func(key string, pm *string) *stripe.PaymentIntentParams {
		p := &stripe.PaymentIntentParams{Amount: stripe.Int64(1000), Currency: stripe.String("usd"),
			Customer: stripe.String(visa), PaymentMethod: pm}
		p.SetIdempotencyKey(key)
		return p
	}
	manual := intentParams("k-manual", visa)
	manual.CaptureMethod = stripe.String("manual")

	for _, tc := range []struct {
		params *stripe.PaymentIntentParams
		status stripe.PaymentIntentStatus
	}{
		{unconfirmed("k-no-method", nil), stripe.PaymentIntentStatusRequiresPaymentMethod},
		{unconfirmed("k-method", stripe.String(card)), stripe.PaymentIntentStatusRequiresConfirmation},
		{intentParams("k-action", sca), stripe.PaymentIntentStatusRequiresAction},
		{manual, stripe.PaymentIntentStatusRequiresCapture},
	} {
		pi, err := intents.New(tc.params)
		require.NoError(t, err)
		require.Equal(t, tc.status, pi.Status)

		p := &stripe.PaymentIntentCancelParams{CancellationReason: stripe.String("abandoned")}
		p.SetIdempotencyKey("cancel-" + pi.ID)
		canceled, err := intents.Cancel(pi.ID, p)
		require.NoError(t, err, "cancel in %s", tc.status)
		require.Equal(t, stripe.PaymentIntentStatusCanceled, canceled.Status)
		require.Equal(t, stripe.PaymentIntentCancellationReasonAbandoned, canceled.CancellationReason)
		require.NotZero(t, canceled.CanceledAt)
		require.Nil(t, canceled.NextAction)
		require.Zero(t, canceled.AmountCapturable)
		require.Equal(t, "payment_intent.canceled", eventTypes(e.fake)[len(e.fake.Events())-1])

		// Cancelled once: a second cancel (another key) is refused.
		_, err = intents.Cancel(pi.ID, &stripe.PaymentIntentCancelParams{})
		se := stripeErr(t, err, http.StatusBadRequest, "payment_intent_unexpected_state")
		require.Contains(t, se.Msg, "has a status of canceled")
		require.Error(t, e.fake.Authenticate(pi.ID, true))
	}

	// The hold of the cancelled manual PaymentIntent is released.
	held := e.fake.PaymentIntents()[3]
	ch := chargeOf(t, e.fake, held.LatestCharge)
	require.True(t, ch.Refunded)
	require.EqualValues(t, 1250, ch.AmountRefunded)
	wire := rawCharge(t, e, ch.ID)
	require.Equal(t, false, wire["captured"])
	require.Equal(t, float64(0), wire["amount_captured"])

	// A succeeded PaymentIntent cannot be cancelled; the error carries it.
	paid, err := intents.New(intentParams("k-paid", visa))
	require.NoError(t, err)
	_, err = intents.Cancel(paid.ID, &stripe.PaymentIntentCancelParams{})
	se := stripeErr(t, err, http.StatusBadRequest, "payment_intent_unexpected_state")
	require.Equal(t, stripe.ErrorTypeInvalidRequest, se.Type)
	require.Contains(t, se.Msg, "You cannot cancel this PaymentIntent because it has a status of succeeded.")
	require.Equal(t, paid.ID, se.PaymentIntent.ID)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, se.PaymentIntent.Status)

	_, err = intents.Cancel(paid.ID, &stripe.PaymentIntentCancelParams{CancellationReason: stripe.String("bored")})
	require.Equal(t, "cancellation_reason", stripeErr(t, err, http.StatusBadRequest, "").Param)
	_, err = intents.Cancel("pi_missing", &stripe.PaymentIntentCancelParams{})
	stripeErr(t, err, http.StatusNotFound, "resource_missing")
}

func TestPaymentIntentCapture(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	intents, refunds := e.stripeClients()
	visa := customerID(t, e, "tok_visa")
	hold := func(key string) *stripe.PaymentIntent {
		p := intentParams(key, visa)
		p.Amount = stripe.Int64(1000)
		p.CaptureMethod = stripe.String("manual")
		pi, err := intents.New(p)
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusRequiresCapture, pi.Status)
		require.EqualValues(t, 1000, pi.AmountCapturable)
		require.Zero(t, pi.AmountReceived)
		return pi
	}

	t.Run("Full", func(t *testing.T) {
		before := len(e.fake.Events())
		pi := hold("ride-1-hold")
		require.Equal(t, []string{"payment_intent.created", "charge.succeeded", "payment_intent.amount_capturable_updated"},
			eventTypes(e.fake)[before:])
		wire := rawCharge(t, e, pi.LatestCharge.ID)
		require.Equal(t, false, wire["captured"])
		require.Equal(t, "succeeded", wire["status"])

		// An uncaptured charge is not refunded: its PaymentIntent is cancelled.
		_, err := refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(pi.ID)})
		stripeErr(t, err, http.StatusBadRequest, "payment_intent_unexpected_state")
		_, err = refunds.New(&stripe.RefundParams{Charge: stripe.String(pi.LatestCharge.ID)})
		stripeErr(t, err, http.StatusBadRequest, "charge_not_refundable")

		before = len(e.fake.Events())
		captured, err := intents.Capture(pi.ID, &stripe.PaymentIntentCaptureParams{})
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusSucceeded, captured.Status)
		require.EqualValues(t, 1000, captured.AmountReceived)
		require.Zero(t, captured.AmountCapturable)
		require.Equal(t, []string{"charge.captured", "payment_intent.succeeded"}, eventTypes(e.fake)[before:])
		wire = rawCharge(t, e, pi.LatestCharge.ID)
		require.Equal(t, true, wire["captured"])
		require.Equal(t, float64(1000), wire["amount_captured"])
		require.Equal(t, float64(0), wire["amount_refunded"])

		_, err = intents.Capture(pi.ID, &stripe.PaymentIntentCaptureParams{})
		se := stripeErr(t, err, http.StatusBadRequest, "payment_intent_unexpected_state")
		require.Contains(t, se.Msg, "has already been captured")
		require.Equal(t, pi.ID, se.PaymentIntent.ID)
	})

	t.Run("Partial", func(t *testing.T) {
		pi := hold("ride-2-hold")
		_, err := intents.Capture(pi.ID, &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(1001)})
		require.Equal(t, "amount_to_capture", stripeErr(t, err, http.StatusBadRequest, "amount_too_large").Param)

		captured, err := intents.Capture(pi.ID, &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(700)})
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusSucceeded, captured.Status)
		require.EqualValues(t, 700, captured.AmountReceived)
		wire := rawCharge(t, e, pi.LatestCharge.ID)
		require.Equal(t, true, wire["captured"])
		require.Equal(t, float64(700), wire["amount_captured"])
		require.Equal(t, float64(300), wire["amount_refunded"], "the rest is released")
		require.Equal(t, false, wire["refunded"])

		// What a refund can take is what was captured.
		ref, err := refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(pi.ID)})
		require.NoError(t, err)
		require.EqualValues(t, 700, ref.Amount)
		ch := chargeOf(t, e.fake, pi.LatestCharge.ID)
		require.True(t, ch.Refunded)
		require.EqualValues(t, 1000, ch.AmountRefunded)
		require.EqualValues(t, 300, ch.AmountReleased)
	})

	t.Run("InAnotherState", func(t *testing.T) {
		sca := customerID(t, e, fakestripe.TokenAuthenticationRequired)
		pi, err := intents.New(intentParams("ride-3-charge", sca))
		require.NoError(t, err)
		_, err = intents.Capture(pi.ID, &stripe.PaymentIntentCaptureParams{})
		se := stripeErr(t, err, http.StatusBadRequest, "payment_intent_unexpected_state")
		require.Contains(t, se.Msg, "has a status of requires_action")
		require.Equal(t, stripe.PaymentIntentStatusRequiresAction, se.PaymentIntent.Status)
	})
}

func TestRefundByPaymentIntent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	intents, refunds := e.stripeClients()
	visa := customerID(t, e, "tok_visa")
	pi, err := intents.New(intentParams("ride-1-charge", visa))
	require.NoError(t, err)

	p := &stripe.RefundParams{PaymentIntent: stripe.String(pi.ID)}
	p.SetIdempotencyKey("ride-1-refund")
	p.AddMetadata("ar_key", "ride-1-refund")
	ref, err := refunds.New(p)
	require.NoError(t, err)
	require.EqualValues(t, 1250, ref.Amount)
	require.Equal(t, stripe.RefundStatusSucceeded, ref.Status)
	require.Equal(t, pi.LatestCharge.ID, ref.Charge.ID)
	require.NotNil(t, ref.PaymentIntent)
	require.Equal(t, pi.ID, ref.PaymentIntent.ID)
	recorded := e.fake.Refunds()
	require.Len(t, recorded, 1)
	require.Equal(t, pi.ID, recorded[0].PaymentIntent)
	require.True(t, chargeOf(t, e.fake, pi.LatestCharge.ID).Refunded)
	require.Equal(t, []string{"refund.created", "charge.refunded"}, eventTypes(e.fake)[3:])

	_, err = refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(pi.ID)})
	stripeErr(t, err, http.StatusBadRequest, "charge_already_refunded")
	_, err = refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(pi.ID), Charge: stripe.String("ch_other")})
	require.Equal(t, "charge", stripeErr(t, err, http.StatusBadRequest, "").Param)
	_, err = refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String("pi_missing")})
	stripeErr(t, err, http.StatusBadRequest, "resource_missing")

	// A PaymentIntent that made no payment has nothing to refund.
	sca := customerID(t, e, fakestripe.TokenAuthenticationRequired)
	waiting, err := intents.New(intentParams("ride-2-charge", sca))
	require.NoError(t, err)
	_, err = refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(waiting.ID)})
	require.Equal(t, "payment_intent", stripeErr(t, err, http.StatusBadRequest, "payment_intent_unexpected_state").Param)
	require.Len(t, e.fake.Refunds(), 1)

	listed := refunds.List(&stripe.RefundListParams{PaymentIntent: stripe.String(pi.ID)})
	var ids []string
	for listed.Next() {
		ids = append(ids, listed.Refund().ID)
	}
	require.NoError(t, listed.Err())
	require.Equal(t, []string{ref.ID}, ids)
}

func TestPaymentIntentList(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	e := newEnv(t, fakestripe.Options{Clock: func() time.Time { return start }})
	intents, _ := e.stripeClients()
	mine := customerID(t, e, "tok_visa")
	other := customerID(t, e, "tok_visa")

	var made []string
	for i := range 4 {
		pi, err := intents.New(intentParams("ride-"+string(rune('a'+i)), mine))
		require.NoError(t, err)
		made = append(made, pi.ID)
		_, err = intents.New(intentParams("other-"+string(rune('a'+i)), other))
		require.NoError(t, err)
		e.fake.Advance(time.Minute)
	}

	list := func(p *stripe.PaymentIntentListParams) []string {
		t.Helper()
		p.Limit = stripe.Int64(2) // several pages
		it := intents.List(p)
		var ids []string
		for it.Next() {
			pi := it.PaymentIntent()
			require.Equal(t, mine, pi.Customer.ID)
			ids = append(ids, pi.ID)
		}
		require.NoError(t, it.Err())
		return ids
	}
	require.Equal(t, []string{made[3], made[2], made[1], made[0]}, list(&stripe.PaymentIntentListParams{Customer: stripe.String(mine)}),
		"newest first")
	require.Equal(t, []string{made[3], made[2]}, list(&stripe.PaymentIntentListParams{Customer: stripe.String(mine),
		CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: start.Add(2 * time.Minute).Unix()}}))
	require.Equal(t, []string{made[2], made[1]}, list(&stripe.PaymentIntentListParams{Customer: stripe.String(mine),
		CreatedRange: &stripe.RangeQueryParams{GreaterThan: start.Unix(), LesserThan: start.Add(3 * time.Minute).Unix()}}))
	require.Empty(t, list(&stripe.PaymentIntentListParams{Customer: stripe.String("cus_nobody")}))

	res, body := e.get(t, "/v1/payment_intents?limit=1")
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	var page struct {
		Object  string `json:"object"`
		URL     string `json:"url"`
		HasMore bool   `json:"has_more"`
		Data    []struct {
			Object string `json:"object"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &page))
	require.Equal(t, "list", page.Object)
	require.Equal(t, "/v1/payment_intents", page.URL)
	require.True(t, page.HasMore)
	require.Equal(t, "payment_intent", page.Data[0].Object)
	res, _ = e.get(t, "/v1/payment_intents?status=succeeded")
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
}

func TestPaymentIntentEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	intents, _ := e.stripeClients()
	cus := customerID(t, e, fakestripe.TokenAuthenticationRequired)
	pi, err := intents.New(intentParams("ride-1-charge", cus))
	require.NoError(t, err)
	require.NoError(t, e.fake.Authenticate(pi.ID, true))

	events := e.fake.Events()
	require.Equal(t, []string{"payment_intent.created", "payment_intent.requires_action",
		"charge.succeeded", "payment_intent.succeeded"}, eventTypes(e.fake))
	statuses := []stripe.PaymentIntentStatus{stripe.PaymentIntentStatusRequiresConfirmation,
		stripe.PaymentIntentStatusRequiresAction, "", stripe.PaymentIntentStatusSucceeded}
	for i, ev := range events {
		var se stripe.Event
		require.NoError(t, json.Unmarshal(ev.Payload, &se))
		require.Equal(t, "2023-10-16", se.APIVersion)
		require.Equal(t, ev.ID, se.ID)
		if !strings.HasPrefix(ev.Type, "payment_intent.") {
			var ch stripe.Charge
			require.NoError(t, json.Unmarshal(se.Data.Raw, &ch))
			require.Equal(t, pi.ID, ch.PaymentIntent.ID)
			continue
		}
		var obj stripe.PaymentIntent
		require.NoError(t, json.Unmarshal(se.Data.Raw, &obj))
		require.Equal(t, pi.ID, obj.ID)
		require.Equal(t, statuses[i], obj.Status, ev.Type)
	}

	// Listed by GET /v1/events as any other event.
	res, body := e.get(t, "/v1/events?type=payment_intent.succeeded")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(body), events[3].ID)
}

// noRedirects is a client that answers a redirect instead of following it.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// challenge sends method to the challenge page at pageURL, with action as
// the form when given.
func challenge(t *testing.T, method, pageURL, action string) (*http.Response, string) {
	t.Helper()
	var body *strings.Reader
	if action != "" {
		body = strings.NewReader(url.Values{"action": {action}}.Encode())
	} else {
		body = strings.NewReader("")
	}
	req, err := http.NewRequest(method, pageURL, body)
	require.NoError(t, err)
	if action != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := noRedirects.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, string(b)
}

func TestChallengePage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	intents, _ := e.stripeClients()
	cus := customerID(t, e, fakestripe.TokenAuthenticationRequired)
	pi, err := intents.New(intentParams("ride-1-charge", cus))
	require.NoError(t, err)
	page := pi.NextAction.RedirectToURL.URL
	requests := len(e.fake.Requests())

	res, html := challenge(t, http.MethodGet, page, "")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
	require.Contains(t, html, "3-D Secure test page")
	require.Contains(t, html, "12.50 EUR")
	require.Contains(t, html, `id="complete"`)
	require.Contains(t, html, `id="fail"`)
	require.Contains(t, html, `value="complete"`)
	require.Contains(t, html, `value="fail"`)
	require.Equal(t, 2, strings.Count(html, `action="/_fake/challenge/`+pi.ID+`"`), "both forms post to the page")

	res, _ = challenge(t, http.MethodPost, page, "complete")
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, returnURL+"&payment_intent="+pi.ID+"&payment_intent_client_secret="+pi.ClientSecret+
		"&redirect_status=succeeded", res.Header.Get("Location"))
	got, err := intents.Get(pi.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, got.Status)
	charges, events := e.fake.Charges(), e.fake.Events()
	require.Len(t, charges, 1)

	// Answered once: the page says so, and nothing changes.
	for _, action := range []string{"complete", "fail"} {
		res, html = challenge(t, http.MethodPost, page, action)
		require.Equal(t, http.StatusConflict, res.StatusCode)
		require.Contains(t, html, "not waiting for authentication")
	}
	res, _ = challenge(t, http.MethodGet, page, "")
	require.Equal(t, http.StatusConflict, res.StatusCode)
	require.Equal(t, charges, e.fake.Charges())
	require.Equal(t, events, e.fake.Events())
	require.Equal(t, fakestripe.PaymentIntentSucceeded, e.fake.PaymentIntents()[0].Status)

	// Failed: back to the return URL all the same.
	p := intentParams("ride-2-charge", cus)
	p.ReturnURL = stripe.String("https://rides.example/book/return")
	failing, err := intents.New(p)
	require.NoError(t, err)
	res, html = challenge(t, http.MethodPost, failing.NextAction.RedirectToURL.URL, "shrug")
	require.Equal(t, http.StatusBadRequest, res.StatusCode, html)
	res, _ = challenge(t, http.MethodPost, failing.NextAction.RedirectToURL.URL, "fail")
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "https://rides.example/book/return?payment_intent="+failing.ID+"&payment_intent_client_secret="+
		failing.ClientSecret+"&redirect_status=failed", res.Header.Get("Location"))
	got, err = intents.Get(failing.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, got.Status)

	res, _ = challenge(t, http.MethodGet, e.url+"/_fake/challenge/pi_missing", "")
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	require.Len(t, e.fake.Requests(), requests+3, "the page's requests are not API requests: only two Gets and a create were")
}

func TestAuthenticateControlEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{PublicURL: "https://stripe.fake.example/"})
	intents, _ := e.stripeClients()
	cus := customerID(t, e, fakestripe.TokenAuthenticationRequired)
	pi, err := intents.New(intentParams("ride-1-charge", cus))
	require.NoError(t, err)
	require.Equal(t, "https://stripe.fake.example/_fake/challenge/"+pi.ID, pi.NextAction.RedirectToURL.URL)

	control := func(path, body string) (int, []byte) {
		req, err := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(body))
		require.NoError(t, err)
		res, b := do(t, req)
		return res.StatusCode, b
	}
	status, _ := control("/_fake/payment_intents/"+pi.ID+"/authenticate", `{}`)
	require.Equal(t, http.StatusBadRequest, status)
	status, _ = control("/_fake/payment_intents/pi_missing/authenticate", `{"complete":true}`)
	require.Equal(t, http.StatusNotFound, status)
	status, body := control("/_fake/payment_intents/"+pi.ID+"/authenticate", `{"complete":false}`)
	require.Equal(t, http.StatusOK, status, string(body))
	var got fakestripe.PaymentIntent
	require.NoError(t, json.Unmarshal(body, &got))
	require.Equal(t, fakestripe.PaymentIntentRequiresPaymentMethod, got.Status)
	require.Equal(t, "payment_intent_authentication_failure", got.LastPaymentError.Code)
	status, _ = control("/_fake/payment_intents/"+pi.ID+"/authenticate", `{"complete":true}`)
	require.Equal(t, http.StatusConflict, status)
	require.Empty(t, e.fake.Charges())
}

func TestPaymentIntentRoutesAndFaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t, fakestripe.Options{})
	intents, _ := e.stripeClients()
	cus := customerID(t, e, "tok_visa")

	for _, path := range []string{"/v1/payment_intents/pi_x/explode", "/v1/payment_intents/pi_x/confirm/again",
		"/v1/payment_intents//confirm", "/v1/charges/ch_x/capture"} {
		res, body := e.post(t, path, testKey, "", url.Values{})
		require.Equal(t, http.StatusNotFound, res.StatusCode, path)
		require.Contains(t, decodeError(t, body).Error.Message, "Unrecognized request URL")
	}
	res, body := e.post(t, "/v1/payment_intents", testKey, "", url.Values{"amount": {"100"}, "currency": {"usd"}, "colour": {"red"}})
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Equal(t, "parameter_unknown", decodeError(t, body).Error.Code)
	for param, form := range map[string]url.Values{
		"amount":         {"currency": {"usd"}},
		"currency":       {"amount": {"100"}},
		"capture_method": {"amount": {"100"}, "currency": {"usd"}, "capture_method": {"later"}},
		"confirm":        {"amount": {"100"}, "currency": {"usd"}, "confirm": {"yes"}},
		"off_session":    {"amount": {"100"}, "currency": {"usd"}, "off_session": {"true"}},
		"customer":       {"amount": {"100"}, "currency": {"usd"}, "customer": {"cus_missing"}},
		"payment_method": {"amount": {"100"}, "currency": {"usd"}, "customer": {cus}, "payment_method": {"card_other"}},
	} {
		res, body := e.post(t, "/v1/payment_intents", testKey, "", form)
		require.Equal(t, http.StatusBadRequest, res.StatusCode, param)
		require.Equal(t, param, decodeError(t, body).Error.Param)
	}
	require.Empty(t, e.fake.PaymentIntents())

	// Faults target the operations by name.
	p := intentParams("ride-1-charge", cus)
	p.Confirm = nil
	p.ReturnURL = nil
	pi, err := intents.New(p)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, pi.Status)
	e.fake.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentConfirm, Kind: fakestripe.FaultStatus, Status: http.StatusServiceUnavailable, Times: 1})
	_, err = intents.Confirm(pi.ID, &stripe.PaymentIntentConfirmParams{})
	stripeErr(t, err, http.StatusServiceUnavailable, "")
	confirmed, err := intents.Confirm(pi.ID, &stripe.PaymentIntentConfirmParams{})
	require.NoError(t, err, "with the customer's default card")
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, confirmed.Status)
	for _, op := range []string{fakestripe.OpPaymentIntentCreate, fakestripe.OpPaymentIntentRetrieve,
		fakestripe.OpPaymentIntentList, fakestripe.OpPaymentIntentConfirm, fakestripe.OpPaymentIntentCancel,
		fakestripe.OpPaymentIntentCapture} {
		require.NoError(t, fakestripe.Fault{Op: op, Kind: fakestripe.FaultDropBefore}.Validate(), op)
	}
	var ops []string
	for _, r := range e.fake.Requests() {
		if strings.HasPrefix(r.Op, "payment_intent.") {
			ops = append(ops, r.Op)
		}
	}
	require.Equal(t, []string{"payment_intent.create", "payment_intent.create", "payment_intent.create",
		"payment_intent.create", "payment_intent.create", "payment_intent.create", "payment_intent.create",
		"payment_intent.create", "payment_intent.create", "payment_intent.confirm", "payment_intent.confirm"},
		ops)
}
