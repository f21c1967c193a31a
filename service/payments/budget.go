package payments

import "time"

// stripe-go's backoff between retries (stripe.go, sleepTime): the n-th
// retry (n from 0) sleeps min(minRetryDelay*(1+n²), maxRetryDelay), less up
// to a quarter of jitter, never below minRetryDelay. The constants are
// unexported there; these copies must follow them.
const (
	minRetryDelay = 500 * time.Millisecond
	maxRetryDelay = 5 * time.Second
)

// budgetMargin covers the work around the HTTP attempts: encoding,
// decoding, scheduling.
const budgetMargin = time.Second

// maxBackoff is the longest total sleep stripe-go makes across retries.
func maxBackoff(retries int64) time.Duration {
	var total time.Duration
	for n := range retries {
		total += min(minRetryDelay+minRetryDelay*time.Duration(n*n), maxRetryDelay)
	}
	return total
}

// budget is the upper bound of one call: retries+1 attempts of at most
// timeout each, the backoff between them, and budgetMargin.
func budget(timeout time.Duration, retries int64) time.Duration {
	return time.Duration(retries+1)*timeout + maxBackoff(retries) + budgetMargin
}
