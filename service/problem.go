package service

// Problem is an RFC 9457 problem detail. Finished requests that failed
// definitively (a declined card) store one as their response body.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// Problem types of the stored responses and of the HTTP errors, as URI
// references relative to the service.
const (
	ProblemCardDeclined     = "/problems/card-declined"
	ProblemPaymentRejected  = "/problems/payment-rejected"
	ProblemKeyReused        = "/problems/idempotency-key-reused"
	ProblemKeyInUse         = "/problems/idempotency-key-in-use"
	ProblemProcessorDown    = "/problems/processor-unavailable"
	ProblemInvalidKeyHeader = "/problems/invalid-idempotency-key"
	// ProblemRideNotRefundable: the ride has no charge to refund.
	ProblemRideNotRefundable = "/problems/ride-not-refundable"
	// ProblemRefundRejected: the payment processor refused the refund
	// definitively; stored on the key and replayed.
	ProblemRefundRejected = "/problems/refund-rejected"
)
