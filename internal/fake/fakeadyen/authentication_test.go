package fakeadyen

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAuthenticationCompleted is a shopper whose bank asks for
// authentication: the payment waits (RedirectShopper, no pspReference, one
// payment however often its key is sent), the challenge page offers both
// buttons, Complete authorises the payment, notifies it and sends the
// browser back with a redirectResult, which /payments/details exchanges for
// the outcome, the same each time.
func TestAuthenticationCompleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	card := e.store("shopper-1", TokenAuthenticationRequired)
	body := payment("shopper-1", card, "ar-ch-1", InteractionEcommerce, "https://rides.example/return?key=ar-ch-1#done")

	status, raw := call(t, e.client, http.MethodPost, e.base+"/v71/payments", "pay-1", body)
	require.Equal(t, http.StatusOK, status, string(raw))
	status, again := call(t, e.client, http.MethodPost, e.base+"/v71/payments", "pay-1", body)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, string(raw), string(again), "the key answers what it made")
	status, out := e.post("/v71/payments", "pay-1", body)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, ResultRedirectShopper, out["resultCode"])
	require.Equal(t, "ar-ch-1", out["merchantReference"])
	require.NotContains(t, out, "pspReference", "Adyen tells the pspReference with the outcome")
	action := out["action"].(map[string]any)
	require.Equal(t, "redirect", action["type"])
	require.Equal(t, http.MethodGet, action["method"])
	require.Equal(t, "scheme", action["paymentMethodType"])
	page := action["url"].(string)
	require.True(t, strings.HasPrefix(page, e.base+"/_fake/challenge/"), page)

	require.Len(t, e.fake.Payments(), 1, "one payment for the key")
	pending := e.fake.PendingChallenges()
	require.Len(t, pending, 1)
	pay := pending[0]
	require.Equal(t, page, pay.ChallengeURL)
	require.Equal(t, page, e.base+"/_fake/challenge/"+pay.ChallengeID)
	require.NotContains(t, page, pay.PSPReference, "the page is not named by the pspReference")
	require.Equal(t, "https://rides.example/return?key=ar-ch-1#done", pay.ReturnURL)
	require.Empty(t, pay.RedirectResult)

	resp, html := e.browse(http.MethodGet, page, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/html")
	require.Contains(t, html, `id="complete"`)
	require.Contains(t, html, `id="fail"`)
	require.Contains(t, html, `name="action" value="complete"`)
	require.Contains(t, html, `name="action" value="fail"`)
	require.Contains(t, html, "20.00 USD")
	require.Empty(t, e.notes.received(EventAuthorisation), "nothing is decided yet")

	back := e.answerChallenge(page, "complete")
	require.Equal(t, "rides.example", back.Host)
	require.Equal(t, "/return", back.Path)
	require.Equal(t, "done", back.Fragment)
	require.Equal(t, "ar-ch-1", back.Query().Get("key"), "the returnUrl's own query is kept")
	rr := back.Query().Get("redirectResult")
	require.NotEmpty(t, rr)

	pay = e.paymentOf("ar-ch-1")
	require.True(t, pay.Authorised())
	require.Equal(t, rr, pay.RedirectResult)
	require.Empty(t, e.fake.PendingChallenges())
	note := e.notes.await(EventAuthorisation, pay.PSPReference)
	require.Equal(t, "true", note.Success)
	require.Equal(t, "ar-ch-1", note.MerchantReference)
	require.Equal(t, NotifiedAmount{Currency: "USD", Value: 2000}, note.Amount)
	require.Equal(t, "ar-ch-1", note.AdditionalData["metadata.ar_key"])

	details := map[string]any{"details": map[string]string{"redirectResult": rr}}
	status, first := call(t, e.client, http.MethodPost, e.base+"/v71/payments/details", "details-1", details)
	require.Equal(t, http.StatusOK, status, string(first))
	require.JSONEq(t, `{"pspReference":"`+pay.PSPReference+`","resultCode":"Authorised","merchantReference":"ar-ch-1",
		"amount":{"currency":"USD","value":2000}}`, string(first))
	status, second := call(t, e.client, http.MethodPost, e.base+"/v71/payments/details", "details-2", details)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, string(first), string(second), "the same redirectResult answers the same outcome")

	// The page is answered: it offers nothing more, and changes nothing.
	resp, html = e.browse(http.MethodGet, page, nil)
	require.Equal(t, http.StatusConflict, resp.StatusCode, html)
	resp, html = e.browse(http.MethodPost, page, url.Values{"action": {"fail"}})
	require.Equal(t, http.StatusConflict, resp.StatusCode, html)
	require.True(t, e.paymentOf("ar-ch-1").Authorised())
	require.Len(t, e.notes.received(EventAuthorisation), 1)

	// The journal has the API requests, not the shopper's browser.
	var ops []string
	for _, r := range e.fake.Journal() {
		ops = append(ops, r.Op)
	}
	require.Equal(t, []string{OpStore, OpPayment, OpPayment, OpPayment, OpDetails, OpDetails}, ops)
}

// TestAuthenticationRefused: a shopper who fails the authentication, and a
// card refused for want of funds once authenticated, are Refused with
// Adyen's reasons, in the answer of /payments/details and the notification
// alike.
func TestAuthenticationRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, source, action, reason, code string
	}{
		{"failed", PaymentMethodThreeDSecure2Required, "fail", "3D Not Authenticated", "11"},
		{"insufficient funds", TokenAuthenticationRequiredChargeDeclinedInsufficientFunds, "complete", "Not enough balance", "12"},
		{"insufficient funds, failed", PaymentMethodAuthenticationRequiredChargeDeclinedInsufficientFunds, "fail", "3D Not Authenticated", "11"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Options{})
			page := e.challenge("shopper-1", tc.source, "ar-ch-1")
			back := e.answerChallenge(page, tc.action)
			rr := back.Query().Get("redirectResult")
			require.NotEmpty(t, rr)

			pay := e.paymentOf("ar-ch-1")
			require.Equal(t, ResultRefused, pay.ResultCode)
			note := e.notes.await(EventAuthorisation, pay.PSPReference)
			require.Equal(t, "false", note.Success)
			require.Equal(t, tc.reason, note.Reason)

			status, out := e.post("/v71/payments/details", "details-1", map[string]any{"details": map[string]string{"redirectResult": rr}})
			require.Equal(t, http.StatusOK, status, "%v", out)
			require.Equal(t, pay.PSPReference, out["pspReference"])
			require.Equal(t, ResultRefused, out["resultCode"])
			require.Equal(t, tc.reason, out["refusalReason"])
			require.Equal(t, tc.code, out["refusalReasonCode"])
		})
	}
}

// TestAuthenticateMethod answers the challenge from Go, and over the
// control API, as the page's buttons do.
func TestAuthenticateMethod(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.challenge("shopper-1", TokenAuthenticationRequiredOnSetup, "ar-ch-1")
	rr, err := e.fake.Authenticate("ar-ch-1", true)
	require.NoError(t, err)
	require.Equal(t, rr, e.paymentOf("ar-ch-1").RedirectResult)
	require.True(t, e.paymentOf("ar-ch-1").Authorised())
	_, err = e.fake.Authenticate("ar-ch-1", false)
	require.Error(t, err, "already answered")
	require.True(t, e.paymentOf("ar-ch-1").Authorised())
	_, err = e.fake.Authenticate("ar-ch-nope", true)
	require.Error(t, err)

	e.challenge("shopper-2", PaymentMethodAuthenticationRequired, "ar-ch-2")
	status, out := e.post("/_fake/authenticate", "", map[string]any{"reference": "ar-ch-2", "complete": false})
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Equal(t, e.paymentOf("ar-ch-2").RedirectResult, out["redirectResult"])
	require.Equal(t, ResultRefused, e.paymentOf("ar-ch-2").ResultCode)
	status, _ = e.post("/_fake/authenticate", "", map[string]any{"reference": "ar-ch-2", "complete": true})
	require.Equal(t, http.StatusConflict, status)
	status, _ = e.post("/_fake/authenticate", "", map[string]any{"reference": "ar-ch-3", "complete": true})
	require.Equal(t, http.StatusNotFound, status)
	status, _ = e.post("/_fake/authenticate", "", map[string]any{"reference": "ar-ch-2"})
	require.Equal(t, http.StatusBadRequest, status)
}

// TestAuthenticationWithoutShopper: a merchant-initiated payment (ContAuth)
// with a card that needs authentication is refused, code 38; other cards
// pay directly with or without the shopper; a shopper-present payment with
// such a card needs a returnUrl.
func TestAuthenticationWithoutShopper(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	for i, source := range []string{
		TokenAuthenticationRequired, PaymentMethodAuthenticationRequired,
		TokenAuthenticationRequiredOnSetup, PaymentMethodAuthenticationRequiredOnSetup,
		TokenThreeDSecure2Required, PaymentMethodThreeDSecure2Required,
		TokenAuthenticationRequiredChargeDeclinedInsufficientFunds, PaymentMethodAuthenticationRequiredChargeDeclinedInsufficientFunds,
	} {
		shopper := "shopper-" + string(rune('a'+i))
		card := e.store(shopper, source)
		status, out := e.post("/v71/payments", "pay-"+shopper, payment(shopper, card, "ar-"+shopper, InteractionContAuth, ""))
		require.Equal(t, http.StatusOK, status, "%v", out)
		require.Equal(t, ResultRefused, out["resultCode"], source)
		require.Equal(t, "Authentication required", out["refusalReason"])
		require.Equal(t, "38", out["refusalReasonCode"])
		psp := out["pspReference"].(string)
		require.NotEmpty(t, psp)
		note := e.notes.await(EventAuthorisation, psp)
		require.Equal(t, "false", note.Success)
		require.Equal(t, "Authentication required", note.Reason)

		status, out = e.post("/v71/payments", "pay-ecom-"+shopper, payment(shopper, card, "ar-ecom-"+shopper, InteractionEcommerce, ""))
		require.Equal(t, http.StatusUnprocessableEntity, status)
		require.Equal(t, "130", out["errorCode"])
		require.Contains(t, out["message"], "returnUrl")
	}
	require.Len(t, e.fake.Payments(), 8, "no payment without its returnUrl")

	card := e.store("shopper-visa", "tok_visa")
	for _, interaction := range []string{InteractionContAuth, InteractionEcommerce} {
		status, out := e.post("/v71/payments", "pay-visa-"+interaction,
			payment("shopper-visa", card, "ar-visa-"+interaction, interaction, "https://rides.example/return"))
		require.Equal(t, http.StatusOK, status, "%v", out)
		require.Equal(t, ResultAuthorised, out["resultCode"], interaction)
		require.NotEmpty(t, out["pspReference"])
		require.NotContains(t, out, "action")
	}
}

// TestPaymentDetailsRefusals: a redirectResult the fake never issued, and
// none at all, are Adyen's validation errors.
func TestPaymentDetailsRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.challenge("shopper-1", TokenAuthenticationRequired, "ar-ch-1")
	rr, err := e.fake.Authenticate("ar-ch-1", true)
	require.NoError(t, err)

	status, out := e.post("/v71/payments/details", "details-forged", map[string]any{"details": map[string]string{"redirectResult": rr + "x"}})
	require.Equal(t, http.StatusUnprocessableEntity, status)
	require.Equal(t, "validation", out["errorType"])
	require.Contains(t, out["message"], "redirectResult")
	status, out = e.post("/v71/payments/details", "details-empty", map[string]any{"details": map[string]string{}})
	require.Equal(t, http.StatusUnprocessableEntity, status)
	require.Contains(t, out["message"], "details.redirectResult")
	status, out = e.post("/v71/payments/details", "details-ok", map[string]any{"details": map[string]string{"redirectResult": rr}})
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Equal(t, ResultAuthorised, out["resultCode"])
}

// TestChallengeURL: the challenge page is under Options.PublicURL when
// set; an unknown page is 404.
func TestChallengeURL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{PublicURL: "https://adyen.fake.example/"})
	page := e.challenge("shopper-1", TokenAuthenticationRequired, "ar-ch-1")
	require.Equal(t, "https://adyen.fake.example/_fake/challenge/"+e.paymentOf("ar-ch-1").ChallengeID, page)

	resp, html := e.browse(http.MethodGet, e.base+"/_fake/challenge/nope", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, html)
	resp, html = e.browse(http.MethodPost, e.base+"/_fake/challenge/"+e.paymentOf("ar-ch-1").ChallengeID, url.Values{"action": {"maybe"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, html)
	require.True(t, e.paymentOf("ar-ch-1").AwaitingAuthentication())
}
