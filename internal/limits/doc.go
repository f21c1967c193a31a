// Package limits holds the service's admission control: the per-rider and
// per-address budgets (GCRA buckets, in process or shared through Redis),
// the load shedder that refuses work at once instead of queueing it past a
// client's timeout, and the record of bookings already under way whose
// retries keep the reserved share. Nothing here touches the database or an
// idempotency key: a request refused here has written nothing.
package limits
