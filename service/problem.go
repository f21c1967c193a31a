package service

// Problem is an RFC 9457 problem detail. Finished requests that failed
// definitively (a declined card, a refused refund) store one as their
// response body.
type Problem struct {
	Type   string `json:"type" format:"uri-reference" example:"/problems/card-declined" doc:"A URI reference naming the problem type."`
	Title  string `json:"title" example:"Card declined" doc:"A short summary of the problem type."`
	Status int    `json:"status" example:"402" doc:"The HTTP status code."`
	Detail string `json:"detail,omitempty" example:"the card was declined: Your card was declined." doc:"What happened to this request."`
	// Instance (RFC 9457) names the ride a problem is about, such as the
	// ride whose balance is due; absent elsewhere.
	Instance string `json:"instance,omitempty" format:"uri-reference" example:"/rides/5351843670591273" doc:"A URI reference naming the occurrence: the ride the problem is about, such as the ride whose balance is due (402 /problems/balance-due; pay it with POST /rides/{id}/balance). Absent elsewhere."`
	// RideID, an extension member, names the ride a declined booking
	// created (402), so that its rider can find it; absent elsewhere.
	RideID int64 `json:"ride_id,omitempty" example:"5351843670591273" doc:"Extension member of a declined booking (402): the ride the booking created, whose charge_status is declined (GET /rides/{id}). Absent from answers stored before the service named the ride."`
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
	// ProblemTripCaptured: a cancellation found the trip's hold captured
	// already (its completion was lost with a restore, or made outside the
	// service): the ride is completed, not cancelled (409).
	ProblemTripCaptured = "/problems/trip-captured"
)
