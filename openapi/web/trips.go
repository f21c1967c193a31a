package web

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/atomicrides/atomicrides/openapi/httpctx"
	"github.com/atomicrides/atomicrides/service"
)

// A trip's money on the ride page (capture trip): the fare held while the
// trip runs, with a form to cancel the ride; the fare, what was captured of
// the hold and the part above it once completed; nothing charged once the
// hold is released; and a form to pay a balance the rider owes.
//
// Like the booking form, each of the ride page's forms carries its own
// idempotency key in a hidden field, minted when the page is rendered:
// submitting the form twice (a double click, a resubmission after a slow
// answer, going back and submitting again) sends the same key, so the
// service cancels, or pays, once and answers every submission alike. A page
// answering a submission that can be tried again (the processor did not
// answer, an earlier submission still runs) carries the submitted key; one
// answering a declined payment of the balance carries a new key, since the
// decline is the stored answer of the old one.

// owedView is the balance that refused a booking: the ride that owes it and
// the amount ("" when it could not be read).
type owedView struct {
	RideID int64
	Amount string
}

// rideKeys are the idempotency keys of a ride page's forms that a
// submission carries over; an empty one is minted.
type rideKeys struct{ Cancel, Pay string }

// tripView is what the ride page shows of a trip's money.
type tripView struct {
	// Status is the ride's charge status.
	Status string
	// Held is the amount held when the ride was booked; HeldUntil, while
	// it is held, when the hold is released unless the trip ends before.
	Held, HeldUntil string
	// Fare is the trip's final fare, Captured what the processor captured
	// of the hold ("" until it confirms), Extra the part of the fare above
	// the hold and ExtraStatus what became of it.
	Fare, Captured, Extra, ExtraStatus string
	// Released says that the hold was released (the ride cancelled, or its
	// hold expired).
	Released bool
	// CaptureFailure is the processor's reason for failing the capture.
	CaptureFailure string
	// BalanceDue is what the rider owes for the ride.
	BalanceDue string
	// CancelKey shows the "Cancel ride" form, with this key; PayKey the
	// "Pay the balance" form.
	CancelKey, PayKey string
}

// tripViewOf is what the page shows of ride's trip; nil for a ride charged
// at booking.
func tripViewOf(ride *service.Ride, keys rideKeys) *tripView {
	if ride.Capture != service.CaptureTrip {
		return nil
	}
	t := &tripView{
		Status: string(ride.ChargeStatus), Held: amount(ride.AmountCents, ride.Currency),
		Released: ride.ReleasedAt != nil,
	}
	if ride.HoldExpiresAt != nil {
		t.HeldUntil = ride.HoldExpiresAt.UTC().Format("2006-01-02 15:04 UTC")
	}
	if ride.FareCents != nil {
		t.Fare = amount(*ride.FareCents, ride.Currency)
	}
	if ride.CapturedCents != nil {
		t.Captured = amount(*ride.CapturedCents, ride.Currency)
	}
	if ride.ExtraCents != nil {
		t.Extra = amount(*ride.ExtraCents, ride.Currency)
	}
	if ride.ExtraStatus != nil {
		t.ExtraStatus = *ride.ExtraStatus
	}
	if ride.CaptureFailure != nil {
		t.CaptureFailure = *ride.CaptureFailure
	}
	switch ride.ChargeStatus {
	case service.RideChargeAuthorized, service.RideChargeCancelling:
		// While cancelling, a cancellation that met a processor outage
		// is driven on by the rider's next one.
		t.CancelKey = cmp.Or(keys.Cancel, rand.Text())
	}
	if ride.BalanceDueCents > 0 {
		t.BalanceDue = amount(ride.BalanceDueCents, ride.Currency)
		t.PayKey = cmp.Or(keys.Pay, rand.Text())
	}
	return t
}

// tripNotice is the ride page's notice about a trip's money.
func tripNotice(ride *service.Ride) (notice, kind string) {
	if ride.Capture != service.CaptureTrip {
		return "", ""
	}
	switch ride.ChargeStatus {
	case service.RideChargeAuthorized:
		return "Booked: the fare is held on your card, not charged. It is charged when the trip ends; cancel before then and nothing is charged.", "ok"
	case service.RideChargeCancelling:
		return "Cancelling: the hold on your card is being released. Nothing is charged.", "info"
	case service.RideChargeCancelled:
		return "Cancelled: the hold on your card was released. Nothing was charged.", "ok"
	case service.RideChargeExpired:
		if ride.ReleasedAt != nil {
			return "The trip was not completed in time: the hold on your card was released. Nothing was charged.", "info"
		}
	case service.RideChargeCapturing:
		return "Trip completed: its fare is being charged.", "info"
	case service.RideChargeCompleted:
		if ride.BalanceDueCents > 0 {
			return "Trip completed: part of its fare is still due.", "error"
		}
		return "Trip completed and paid.", "ok"
	case service.RideChargeCaptureFailed:
		return "Trip completed, but its fare could not be charged.", "error"
	}
	return "", ""
}

// ridePath is the page of ride id.
func ridePath(id int64) string { return "/book/rides/" + strconv.FormatInt(id, 10) }

// showRide renders ride's page with data's notices; keys carries the keys
// of the forms a submission answered by this page sent.
func (wb *Pages) showRide(w http.ResponseWriter, r *http.Request, s *session, status int, ride *service.Ride, data *pageData, keys rideKeys) {
	data.Title = "Ride #" + strconv.FormatInt(ride.ID, 10)
	data.Email, data.CSRF, data.Ride = s.user.Email, s.csrf, ride
	data.Trip = tripViewOf(ride, keys)
	cache := "private, no-cache"
	if r.Method != http.MethodGet {
		cache = "no-store"
	}
	wb.render(w, r, status, cache, "ride", data)
}

// rideAnswer answers a submission of one of the ride page's forms with the
// ride as it is now, under the notice notice(ride).
func (wb *Pages) rideAnswer(w http.ResponseWriter, r *http.Request, s *session, id int64, status int, notice func(*service.Ride) string, keys rideKeys) {
	ride, ok := wb.rideOf(w, r, s, id, "ride answer")
	if !ok {
		return
	}
	kind := "error"
	if status < 300 {
		kind = "info"
	}
	wb.showRide(w, r, s, status, ride, &pageData{Notice: notice(ride), NoticeKind: kind}, keys)
}

// rideOf reads the rider's ride id, or answers that it has none such (or
// an internal error, logged as op) and reports false.
func (wb *Pages) rideOf(w http.ResponseWriter, r *http.Request, s *session, id int64, op string) (*service.Ride, bool) {
	ride, err := wb.svc.RideGet(r.Context(), s.user.ID, id)
	if err == nil {
		return ride, true
	}
	if service.ErrorCode(err) == service.CodeNotFound {
		wb.message(w, r, s, http.StatusNotFound, "No such ride", "")
	} else {
		wb.internal(w, r, s, op, err)
	}
	return nil, false
}

func constNotice(msg string) func(*service.Ride) string {
	return func(*service.Ride) string { return msg }
}

// rideFormFailed answers what a ride page's form failed with, the errors
// every form of the page shares: no such ride, a form used for another
// request, or an internal error (logged as op).
func (wb *Pages) rideFormFailed(w http.ResponseWriter, r *http.Request, s *session, op string, err error, nothing string) {
	switch service.ErrorCode(err) {
	case service.CodeNotFound, service.CodeInvalid:
		wb.message(w, r, s, http.StatusNotFound, "No such ride", nothing)
	case service.CodeKeyReused:
		wb.message(w, r, s, http.StatusUnprocessableEntity, "This form was already used",
			"This form was already used for something else. Open the ride's page again. "+nothing)
	default:
		wb.internal(w, r, s, op, err)
	}
}

// rideForm reads a submission of one of the ride page's forms: the
// signed-in rider, the ride of its path and the form's key. When the form
// cannot be acted on, it answers the request itself, saying nothing (what
// was not done), and returns ok false.
func (wb *Pages) rideForm(w http.ResponseWriter, r *http.Request, nothing string) (s *session, id int64, key string, ok bool) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	s, err := wb.session(w, r)
	if err != nil {
		wb.signInPage(w, r, err, http.StatusUnauthorized, "Sign in again: your session has ended. "+nothing)
		return nil, 0, "", false
	}
	if err := r.ParseForm(); err != nil {
		wb.message(w, r, s, http.StatusBadRequest, "Unreadable form", "The form could not be read. "+nothing)
		return nil, 0, "", false
	}
	// The form is read: the submission may now wait for an earlier one and
	// then for the payment processor, longer than the server's timeouts.
	httpctx.ExtendDeadlines(w, bookingWait+wb.svc.Lease())
	if err := wb.checkForm(r, s); err != nil {
		wb.logger.InfoContext(r.Context(), "ride form refused", "request_id", httpctx.RequestID(r.Context()), "err", err)
		wb.message(w, r, s, http.StatusForbidden, "Form refused", "This form did not come from this site, or from an earlier sign-in. "+nothing)
		return nil, 0, "", false
	}
	id, err = strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		wb.message(w, r, s, http.StatusNotFound, "No such ride", nothing)
		return nil, 0, "", false
	}
	key, err = service.ParseIdempotencyKey(r.PostFormValue("idempotency_key"))
	if err != nil {
		wb.message(w, r, s, http.StatusBadRequest, "Damaged form", "The form's key is missing or damaged. "+nothing)
		return nil, 0, "", false
	}
	return s, id, key, true
}

// rideCancel cancels the rider's ride under the form's key, releasing its
// hold, and answers with a redirect to the ride (Post/Redirect/Get): every
// submission of the form ends on the cancelled ride. A ride that can no
// longer be cancelled (completed meanwhile) is shown with why.
func (wb *Pages) rideCancel(w http.ResponseWriter, r *http.Request) {
	const nothing = "Nothing was cancelled."
	s, id, key, ok := wb.rideForm(w, r, nothing)
	if !ok {
		return
	}
	ctx := r.Context()
	resp, err := waitForKey(ctx, func() (*service.Response, error) {
		return wb.svc.RideCancel(ctx, s.user.ID, key, id, httpctx.ClientIP(ctx))
	})
	if err == nil {
		// 202: the processor confirms the cancel later (Adyen); the ride
		// page shows it cancelling until then.
		if resp.Status == http.StatusOK || resp.Status == http.StatusCreated || resp.Status == http.StatusAccepted {
			http.Redirect(w, r, ridePath(id), http.StatusSeeOther)
			return
		}
		err = errors.New("unexpected stored status " + strconv.Itoa(resp.Status))
	}
	switch service.ErrorCode(err) {
	case service.CodeNotCancellable:
		wb.rideAnswer(w, r, s, id, http.StatusConflict, notCancelled, rideKeys{})
	case service.CodeKeyInUse:
		wb.rideAnswer(w, r, s, id, http.StatusAccepted, constNotice(
			"Your cancellation is still being processed. Press Cancel ride again in a moment: the ride is cancelled once."), rideKeys{Cancel: key})
	case service.CodeProcessorUnavailable:
		wb.logger.ErrorContext(ctx, "cancel", "request_id", httpctx.RequestID(ctx), "err", err)
		wb.rideAnswer(w, r, s, id, http.StatusServiceUnavailable, constNotice(
			"The payment processor did not answer. Press Cancel ride again: the ride is cancelled once, and nothing is charged."), rideKeys{Cancel: key})
	default:
		wb.rideFormFailed(w, r, s, "cancel", err, nothing)
	}
}

// notCancelled says why ride could not be cancelled.
func notCancelled(ride *service.Ride) string {
	switch ride.ChargeStatus {
	case service.RideChargeCapturing, service.RideChargeCompleted, service.RideChargeCaptureFailed:
		return "Not cancelled: the trip was completed before your cancellation arrived, so its fare is charged as shown below."
	case service.RideChargeExpired, service.RideChargeCancelling:
		return "Not cancelled: the hold had expired and was released (or is being released). Nothing was charged."
	case service.RideChargeCharged:
		return "Not cancelled: this ride was paid in full when it was booked."
	case service.RideChargePending, service.RideChargeRequiresAction:
		return "Not cancelled: the ride's payment is not decided yet. Nothing is charged until it is."
	case service.RideChargeDeclined:
		return "Nothing to cancel: the ride's payment was declined, and nothing was charged."
	}
	return "This ride cannot be cancelled. Nothing was changed."
}

// balancePay pays the balance the rider owes for the ride under the form's
// key, and answers with a redirect to the ride. A declined payment shows
// the ride, its balance still due, with a new form to pay again once the
// rider registered another card.
func (wb *Pages) balancePay(w http.ResponseWriter, r *http.Request) {
	const nothing = "Nothing was paid."
	s, id, key, ok := wb.rideForm(w, r, nothing)
	if !ok {
		return
	}
	ctx := r.Context()
	resp, err := waitForKey(ctx, func() (*service.Response, error) {
		return wb.svc.RideBalancePay(ctx, s.user.ID, key, id, httpctx.ClientIP(ctx))
	})
	if err == nil {
		switch resp.Status {
		case http.StatusOK, http.StatusCreated:
			http.Redirect(w, r, ridePath(id)+"?paid=1", http.StatusSeeOther)
			return
		case http.StatusPaymentRequired:
			var p service.Problem
			_ = json.Unmarshal(resp.Body, &p)
			reason := cmp.Or(p.Detail, p.Title)
			if reason != "" {
				reason = " (" + reason + ")"
			}
			wb.rideAnswer(w, r, s, id, http.StatusPaymentRequired, constNotice(
				"Not paid: your card was declined"+reason+". Nothing was charged, and the balance is still due. Register another card, then pay again."), rideKeys{})
			return
		}
		err = errors.New("unexpected stored status " + strconv.Itoa(resp.Status))
	}
	switch service.ErrorCode(err) {
	case service.CodeNoBalanceDue:
		wb.rideAnswer(w, r, s, id, http.StatusConflict, constNotice("There is no balance to pay for this ride. "+nothing), rideKeys{})
	case service.CodeKeyInUse:
		wb.rideAnswer(w, r, s, id, http.StatusAccepted, constNotice(
			"Your payment is still being processed. Press Pay the balance again in a moment: the balance is paid once."), rideKeys{Pay: key})
	case service.CodeProcessorUnavailable:
		wb.logger.ErrorContext(ctx, "pay balance", "request_id", httpctx.RequestID(ctx), "err", err)
		wb.rideAnswer(w, r, s, id, http.StatusServiceUnavailable, constNotice(
			"The payment processor did not answer. Press Pay the balance again: the balance is paid once."), rideKeys{Pay: key})
	default:
		wb.rideFormFailed(w, r, s, "pay balance", err, nothing)
	}
}

// owedOf is the balance of ride rideID that refused a booking.
func (wb *Pages) owedOf(ctx context.Context, s *session, rideID int64) *owedView {
	o := &owedView{RideID: rideID}
	ride, err := wb.svc.RideGet(ctx, s.user.ID, rideID)
	if err != nil {
		wb.logger.ErrorContext(ctx, "booking page: balance due", "request_id", httpctx.RequestID(ctx), "ride_id", rideID, "err", err)
		return o
	}
	if ride.BalanceDueCents > 0 {
		o.Amount = amount(ride.BalanceDueCents, ride.Currency)
	}
	return o
}
