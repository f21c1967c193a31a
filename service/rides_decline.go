package service

import (
	"net/http"
	"unicode/utf8"
)

// RideDeclineCodeRejected is the decline code of a ride whose charge the
// processor refused for a reason other than the card.
const RideDeclineCodeRejected = "payment_rejected"

// RideDeclineCodeBookingRefunded is the decline code of a ride whose
// request came back after the orphan policy refunded its charge: nothing
// was charged for it (ProblemBookingRefunded).
const RideDeclineCodeBookingRefunded = "booking_refunded"

// rideDeclineMessageMax bounds a stored decline message (the CHECK on
// rides.decline_message): a longer processor message is cut, never refused,
// so that the request still finishes.
const rideDeclineMessageMax = 1000

// decline is what a rider is told of a declined charge: recorded on the
// ride and answered as the request's stored 402.
type decline struct {
	problemType, title string
	code, message      string
}

// declineOf is the decline that a definitive payment failure means to the
// rider. A card decline shows the processor's message, which the processor
// writes for the payer; any other refusal shows none of the processor's
// words. A refusal of the rider's card itself (PaymentCodeSourceRefused)
// is a card decline whatever its class: the rider recovers by registering
// another card.
func declineOf(pe *PaymentError) decline {
	if pe.Code == PaymentCodeSourceRefused {
		// The processor refused the rider's card itself: the rider
		// recovers by registering another.
		return decline{problemType: ProblemCardDeclined, title: "Card declined", code: pe.Code,
			message: truncateDeclineMessage("the payment source was refused (" + pe.Message + "); register another with PUT /users/{email}")}
	}
	if pe.Class != PaymentClassDecline {
		return decline{
			problemType: ProblemPaymentRejected, title: "Payment rejected",
			code: RideDeclineCodeRejected, message: "the payment processor rejected the charge",
		}
	}
	d := decline{problemType: ProblemCardDeclined, title: "Card declined", code: pe.Code, message: pe.Message}
	if d.code == "" {
		d.code = "card_declined"
	}
	if d.message == "" {
		d.message = "Your card was declined."
	}
	d.message = truncateDeclineMessage(d.message)
	return d
}

// truncateDeclineMessage cuts m to the longest message a ride records, at a
// character boundary.
func truncateDeclineMessage(m string) string {
	if len(m) <= rideDeclineMessageMax {
		return m
	}
	cut := rideDeclineMessageMax
	for cut > 0 && !utf8.RuneStart(m[cut]) {
		cut--
	}
	return m[:cut]
}

// problem is the stored 402 answer of the decline of ride rideID; it names
// the ride, so that the rider can find it (GET /rides/{id}).
func (d decline) problem(rideID int64) Problem {
	detail := d.message
	if d.problemType == ProblemCardDeclined {
		detail = "the card was declined: " + d.message
	}
	return Problem{Type: d.problemType, Title: d.title, Status: http.StatusPaymentRequired, Detail: detail, RideID: rideID}
}
