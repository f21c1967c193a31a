package service

// Problem is an RFC 9457 problem detail. Finished requests that failed
// definitively (a declined card, a refused refund) store one as their
// response body.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// Problem types of the stored responses, as URI references relative to the
// service. They are part of what a finished key replays; the problem types
// of errors that are never stored belong to the HTTP adapter.
const (
	// ProblemCardDeclined: the rider's card was declined (402).
	ProblemCardDeclined = "/problems/card-declined"
	// ProblemPaymentRejected: the payment processor rejected the charge
	// for a reason other than the card (402).
	ProblemPaymentRejected = "/problems/payment-rejected"
	// ProblemBookingRefunded: the request's booking was lost (a restore)
	// and the orphan policy refunded its charge; the request ends without
	// a ride or a charge (409).
	ProblemBookingRefunded = "/problems/booking-refunded"
	// ProblemRefundRejected: the payment processor refused the refund
	// definitively (409).
	ProblemRefundRejected = "/problems/refund-rejected"
)
