// Package fakestripe is a stateful, in-memory stand-in for the subset of the
// Stripe API that the payments adapter uses: customers, charges, refunds,
// the search endpoints of customers and charges, and the list of refunds.
//
// It speaks the same wire format as api.stripe.com (form-encoded requests,
// Stripe-shaped JSON objects and errors, bearer authentication), so the real
// stripe-go client can be pointed at it. Unlike stripe-mock it keeps state:
// objects created are found again by retrieval and search, charges to a
// customer whose card fails are declined, refunds change their charge, and
// the idempotency layer behaves as Stripe documents it (saved responses,
// replays, parameter mismatches, in-flight conflicts, 24-hour expiry).
//
// Tests inspect what happened through the ledger (Customers, Charges,
// Refunds, Requests) and provoke failures with Inject (latency, error
// statuses, connections dropped before or after the operation executed).
// The same controls are reachable over HTTP under /_fake/ for local runs.
//
// # Test tokens
//
// The source given to POST /v1/customers decides how the customer's card
// behaves:
//
//	tok_chargeDeclined                   customer creation fails: 402 card_declined (generic_decline)
//	tok_chargeDeclinedInsufficientFunds  customer creation fails: 402 card_declined (insufficient_funds)
//	tok_chargeCustomerFail               customer is created; every charge to it is declined (402)
//	any other tok_, src_, card_ or pm_   customer is created with a working card
//	(no source)                          customer is created without a card; charges fail with 400 "missing"
//
// # Fault placement
//
// Faults of kind [FaultStatus] and [FaultDropBefore] act in front of the
// idempotency layer, as a load balancer or an overloaded front end would:
// nothing executes and nothing is saved. [FaultLatency] acts after the
// request has claimed its idempotency key, so a slow request holds its key
// and a concurrent request with the same key gets 409. [FaultRefuse] takes
// the place of the operation, once the request has claimed its key, and its
// answer is saved under the key like a decline. [FaultDropAfter] acts after
// the operation executed (or was refused) and its response was saved.
//
// # Control endpoints
//
// For local runs, the server's own endpoints live under /_fake/; they need
// no authentication and are not recorded as requests:
//
//	GET    /_fake/ledger  the Snapshot as JSON
//	GET    /_fake/faults  the active faults
//	POST   /_fake/faults  inject a fault, or an array of faults, e.g.
//	                      {"op":"charge.create","kind":"status","status":503,"times":2}
//	                      {"op":"*","kind":"latency","duration":"2s"}
//	DELETE /_fake/faults  clear every fault
//	POST   /_fake/clock   advance the clock: {"advance":"25h"}
//	POST   /_fake/outage  {"on":true}: every API request answers 503 until {"on":false} (SetOutage)
//	POST   /_fake/reset   forget everything (Reset)
package fakestripe
