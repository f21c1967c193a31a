package fakeadyen

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// cancelBody is the body of POST /cancels of the payment under reference.
func cancelBody(reference string) map[string]any {
	return map[string]any{"merchantAccount": testMerchant, "paymentReference": reference, "reference": reference}
}

// TestCancelPendingPayment: a payment waiting for its shopper is cancelled
// by its merchant reference: received, then TECHNICAL_CANCEL success=true
// naming the payment (never a CANCELLATION, which answers a cancel by
// pspReference); its challenge page can no longer authorise it.
func TestCancelPendingPayment(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	page := e.challenge("shopper-1", TokenAuthenticationRequired, "ar-ch-1")

	status, out := e.post("/v71/cancels", "cancel-1", cancelBody("ar-ch-1"))
	require.Equal(t, http.StatusCreated, status, "%v", out)
	require.Equal(t, "received", out["status"])
	require.Equal(t, "ar-ch-1", out["paymentReference"])
	require.Equal(t, "ar-ch-1", out["reference"])
	require.Equal(t, testMerchant, out["merchantAccount"])
	cancelRef := out["pspReference"].(string)
	pay := e.paymentOf("ar-ch-1")
	require.NotEqual(t, pay.PSPReference, cancelRef)
	require.Equal(t, ResultCancelled, pay.ResultCode)
	require.Empty(t, e.fake.PendingChallenges())

	note := e.notes.await(EventTechnicalCancel, cancelRef)
	require.Equal(t, "true", note.Success)
	require.Empty(t, e.notes.received(EventCancellation))
	require.Equal(t, pay.PSPReference, note.OriginalReference)
	require.Equal(t, "ar-ch-1", note.MerchantReference)
	require.Equal(t, NotifiedAmount{Currency: "USD", Value: 2000}, note.Amount)

	// The key answers what it made, and makes nothing more.
	status, again := e.post("/v71/cancels", "cancel-1", cancelBody("ar-ch-1"))
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, out, again)
	require.Len(t, e.fake.Modifications(), 1)

	resp, html := e.browse(http.MethodGet, page, nil)
	require.Equal(t, http.StatusConflict, resp.StatusCode, html)
	resp, html = e.browse(http.MethodPost, page, url.Values{"action": {"complete"}})
	require.Equal(t, http.StatusConflict, resp.StatusCode, html)
	_, err := e.fake.Authenticate("ar-ch-1", true)
	require.Error(t, err)
	require.Equal(t, ResultCancelled, e.paymentOf("ar-ch-1").ResultCode)
	require.Empty(t, e.notes.received(EventAuthorisation), "a cancelled payment is never decided")

	l := e.fake.Snapshot()
	require.Len(t, l.Modifications, 1)
	require.Equal(t, LedgerModification{PSPReference: cancelRef, Kind: ModificationCancel, PaymentPSPReference: pay.PSPReference,
		PaymentReference: "ar-ch-1", Reference: "ar-ch-1", AmountValue: 2000, Currency: "USD", Success: true,
		Created: l.Modifications[0].Created}, l.Modifications[0])
	require.Equal(t, ResultCancelled, l.Payments[0].ResultCode)
	require.Equal(t, pay.ChallengeID, l.Payments[0].ChallengeID)
}

// TestCancelDecidedPayment: a cancel of a payment already authorised or
// refused, or of no payment, is received and fails; nothing changes.
func TestCancelDecidedPayment(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.challenge("shopper-1", TokenAuthenticationRequired, "ar-ch-1")
	_, err := e.fake.Authenticate("ar-ch-1", true)
	require.NoError(t, err)
	e.challenge("shopper-2", TokenAuthenticationRequired, "ar-ch-2")
	_, err = e.fake.Authenticate("ar-ch-2", false)
	require.NoError(t, err)

	for _, tc := range []struct{ reference, result, reason string }{
		{"ar-ch-1", ResultAuthorised, "Payment already authorised"},
		{"ar-ch-2", ResultRefused, "Payment already refused"},
		{"ar-ch-none", "", "Unknown payment"},
	} {
		status, out := e.post("/v71/cancels", "cancel-"+tc.reference, cancelBody(tc.reference))
		require.Equal(t, http.StatusCreated, status, "%v", out)
		require.Equal(t, "received", out["status"])
		note := e.notes.await(EventTechnicalCancel, out["pspReference"].(string))
		require.Equal(t, "false", note.Success, tc.reference)
		require.Equal(t, tc.reason, note.Reason)
		if tc.result != "" {
			pay := e.paymentOf(tc.reference)
			require.Equal(t, tc.result, pay.ResultCode)
			require.Equal(t, pay.PSPReference, note.OriginalReference)
		} else {
			require.Empty(t, note.OriginalReference)
		}
	}

	status, out := e.post("/v71/cancels", "cancel-no-ref", map[string]any{"merchantAccount": testMerchant})
	require.Equal(t, http.StatusUnprocessableEntity, status)
	require.Contains(t, out["message"], "paymentReference")
}

// TestManualCapture: a payment with additionalData.manualCapture is an
// authorisation held until captured (once, up to its amount) or cancelled
// by its pspReference; a payment captured automatically takes neither.
func TestManualCapture(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	card := e.store("shopper-1", "tok_visa")
	pay := func(reference string, manual bool) string {
		body := payment("shopper-1", card, reference, InteractionContAuth, "")
		if manual {
			body["additionalData"] = map[string]any{"manualCapture": "true"}
		}
		status, out := e.post("/v71/payments", "pay-"+reference, body)
		require.Equal(t, http.StatusOK, status, "%v", out)
		require.Equal(t, ResultAuthorised, out["resultCode"])
		return out["pspReference"].(string)
	}
	capture := func(psp, key string, value int64) NotificationItem {
		status, out := e.post("/v71/payments/"+psp+"/captures", key, map[string]any{
			"merchantAccount": testMerchant, "reference": key, "amount": map[string]any{"currency": "USD", "value": value},
		})
		require.Equal(t, http.StatusCreated, status, "%v", out)
		require.Equal(t, "received", out["status"])
		require.Equal(t, psp, out["paymentPspReference"])
		return e.notes.await(EventCapture, out["pspReference"].(string))
	}

	held := pay("ar-ch-held", true)
	require.True(t, e.paymentOf("ar-ch-held").ManualCapture)
	require.Equal(t, "false", capture(held, "capture-too-much", 2500).Success)
	note := capture(held, "capture-1", 1500)
	require.Equal(t, "true", note.Success)
	require.Equal(t, held, note.OriginalReference)
	require.Equal(t, int64(1500), note.Amount.Value)
	require.Equal(t, int64(1500), e.paymentOf("ar-ch-held").CapturedValue)
	require.Equal(t, "false", capture(held, "capture-2", 500).Success, "captured once")

	auto := pay("ar-ch-auto", false)
	require.Equal(t, "false", capture(auto, "capture-auto", 2000).Success)

	released := pay("ar-ch-released", true)
	status, out := e.post("/v71/payments/"+released+"/cancels", "cancel-released", map[string]any{"merchantAccount": testMerchant, "reference": "release-1"})
	require.Equal(t, http.StatusCreated, status, "%v", out)
	require.Equal(t, "received", out["status"])
	require.Equal(t, released, out["paymentPspReference"])
	note = e.notes.await(EventCancellation, out["pspReference"].(string))
	require.Equal(t, "true", note.Success)
	require.Equal(t, released, note.OriginalReference)
	require.Equal(t, ResultCancelled, e.paymentOf("ar-ch-released").ResultCode)

	status, out = e.post("/v71/payments/"+auto+"/cancels", "cancel-auto", map[string]any{"merchantAccount": testMerchant})
	require.Equal(t, http.StatusCreated, status, "%v", out)
	require.Equal(t, "false", e.notes.await(EventCancellation, out["pspReference"].(string)).Success)
	require.True(t, e.paymentOf("ar-ch-auto").Authorised())

	status, _ = e.post("/v71/payments/NOPE/cancels", "cancel-nope", map[string]any{"merchantAccount": testMerchant})
	require.Equal(t, http.StatusUnprocessableEntity, status)
	status, _ = e.post("/v71/payments/NOPE/captures", "capture-nope", map[string]any{"merchantAccount": testMerchant,
		"amount": map[string]any{"currency": "USD", "value": 100}})
	require.Equal(t, http.StatusUnprocessableEntity, status)

	var ops []string
	for _, r := range e.fake.Journal() {
		if r.Op == OpCancel || r.Op == OpCapture {
			ops = append(ops, r.Op)
		}
	}
	require.Equal(t, []string{OpCapture, OpCapture, OpCapture, OpCapture, OpCancel, OpCancel, OpCancel, OpCapture}, ops)
}

// TestFaultsOnNewOperations: the new operations take faults by name.
func TestFaultsOnNewOperations(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	for _, op := range []string{OpDetails, OpCancel, OpCapture} {
		require.NoError(t, Fault{Op: op, Kind: FaultStatus, Status: 503, Times: 1}.Validate())
	}
	e.challenge("shopper-1", TokenAuthenticationRequired, "ar-ch-1")
	rr, err := e.fake.Authenticate("ar-ch-1", true)
	require.NoError(t, err)
	e.fake.Inject(Fault{Op: OpDetails, Kind: FaultStatus, Status: 503, Times: 1})
	e.fake.Inject(Fault{Op: OpCancel, Kind: FaultStatus, Status: 500, Times: 1})
	details := map[string]any{"details": map[string]string{"redirectResult": rr}}
	status, _ := e.post("/v71/payments/details", "details-1", details)
	require.Equal(t, http.StatusServiceUnavailable, status)
	status, _ = e.post("/v71/payments/details", "details-1", details)
	require.Equal(t, http.StatusOK, status)
	status, _ = e.post("/v71/cancels", "cancel-1", cancelBody("ar-ch-1"))
	require.Equal(t, http.StatusInternalServerError, status)
	require.Empty(t, e.fake.Modifications(), "an injected error executes nothing")
}

// TestFailCapture: a capture that succeeded fails after the fact, named by
// its own pspReference or its payment's: CAPTURE_FAILED follows its
// CAPTURE, the ledger shows the capture failed and nothing captured, and
// the authorisation is held again. A payment without a successful capture
// has nothing to fail.
func TestFailCapture(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	card := e.store("shopper-1", "tok_visa")
	hold := func(reference string) string {
		body := payment("shopper-1", card, reference, InteractionContAuth, "")
		body["additionalData"] = map[string]any{"manualCapture": "true"}
		status, out := e.post("/v71/payments", "pay-"+reference, body)
		require.Equal(t, http.StatusOK, status, "%v", out)
		return out["pspReference"].(string)
	}
	capture := func(psp, key string) string {
		status, out := e.post("/v71/payments/"+psp+"/captures", key, map[string]any{
			"merchantAccount": testMerchant, "reference": key, "amount": map[string]any{"currency": "USD", "value": 1500},
		})
		require.Equal(t, http.StatusCreated, status, "%v", out)
		require.Equal(t, "true", e.notes.await(EventCapture, out["pspReference"].(string)).Success)
		return out["pspReference"].(string)
	}

	byPayment := hold("ar-ch-1")
	_, err := e.fake.FailCapture(byPayment, "")
	require.Error(t, err, "nothing captured yet")
	captureRef := capture(byPayment, "capture-1")
	m, err := e.fake.FailCapture(byPayment, "")
	require.NoError(t, err)
	require.Equal(t, captureRef, m.PSPReference)
	require.False(t, m.Success)
	require.Equal(t, ReasonCaptureRejected, m.Reason)
	note := e.notes.await(EventCaptureFailed, captureRef)
	require.Equal(t, "true", note.Success)
	require.Equal(t, captureRef, note.PSPReference)
	require.Equal(t, byPayment, note.OriginalReference)
	require.Equal(t, "capture-1", note.MerchantReference)
	require.Equal(t, ReasonCaptureRejected, note.Reason)
	require.Equal(t, NotifiedAmount{Currency: "USD", Value: 1500}, note.Amount)
	pay := e.paymentOf("ar-ch-1")
	require.True(t, pay.Authorised())
	require.Zero(t, pay.CapturedValue, "nothing stays captured")
	l := e.fake.Snapshot()
	require.Len(t, l.Modifications, 1)
	require.False(t, l.Modifications[0].Success)
	require.Equal(t, ReasonCaptureRejected, l.Modifications[0].Reason)
	_, err = e.fake.FailCapture(captureRef, "")
	require.Error(t, err, "a failed capture fails once")

	// Named by the capture's own reference, with a reason.
	byCapture := hold("ar-ch-2")
	captureRef = capture(byCapture, "capture-2")
	_, err = e.fake.FailCapture(captureRef, "Rejected by issuer")
	require.NoError(t, err)
	require.Equal(t, "Rejected by issuer", e.notes.await(EventCaptureFailed, captureRef).Reason)

	_, err = e.fake.FailCapture("NOPE", "")
	require.Error(t, err)
	require.Len(t, e.fake.NotificationItems(), 2+2+2, "two AUTHORISATIONs, two CAPTUREs, two CAPTURE_FAILEDs")
}
