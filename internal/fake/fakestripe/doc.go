// Package fakestripe is a stateful, in-memory stand-in for the subset of the
// Stripe API that the payments adapter uses: customers, charges,
// PaymentIntents (with 3-D Secure authentication), refunds, the search
// endpoints of customers and charges, and the lists of charges,
// PaymentIntents, refunds and events.
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
// PaymentIntents, Refunds, Requests) and provoke failures with Inject
// (latency, error statuses, connections dropped before or after the
// operation executed). The same controls are reachable over HTTP under
// /_fake/ for local runs.
//
// # Test tokens
//
// The source given to POST /v1/customers decides how the customer's card
// behaves:
//
//	tok_chargeDeclined                   customer creation fails: 402 card_declined (generic_decline)
//	tok_chargeDeclinedInsufficientFunds  customer creation fails: 402 card_declined (insufficient_funds)
//	tok_chargeCustomerFail               customer is created; every charge to it is declined (402)
//	tok_authenticationRequired,          the bank asks for authentication on every payment (below);
//	pm_card_authenticationRequired       off-session, and on the Charges API, 402 authentication_required
//	tok_authenticationRequiredOnSetup,   the same: no card is ever set up here, so none is exempt
//	pm_card_authenticationRequiredOnSetup
//	tok_threeDSecure2Required,           the same
//	pm_card_threeDSecure2Required
//	tok_authenticationRequiredChargeDeclinedInsufficientFunds,
//	pm_card_authenticationRequiredChargeDeclinedInsufficientFunds
//	                                     authentication asked; once completed, declined (insufficient_funds)
//	any other tok_, src_, card_ or pm_   customer is created with a working card
//	(no source)                          customer is created without a card; charges fail with 400 "missing"
//
// A PaymentIntent's payment_method may also name one of the pm_ test
// payment methods directly; it then behaves as its name says.
//
// # PaymentIntents
//
// POST /v1/payment_intents creates a PaymentIntent, confirmed at once with
// confirm=true; without payment_method it pays with the customer's default
// card. Confirmed, a working card is charged (succeeded, or
// requires_capture with capture_method=manual, until POST …/capture); a
// declining card answers 402 card_error with the PaymentIntent in the
// error, back in requires_payment_method. A card whose bank asks for
// authentication, confirmed on-session, leaves the PaymentIntent in
// requires_action, its next_action a redirect to the challenge page
// (return_url is then required); confirmed off-session it fails with 402
// authentication_required. The charge a PaymentIntent makes carries its
// payment_intent and a copy of its metadata; POST /v1/refunds refunds it
// by payment_intent. Every step emits the events Stripe emits
// (payment_intent.created, .requires_action, .succeeded,
// .amount_capturable_updated, .payment_failed, .canceled; charge.succeeded,
// .failed, .captured). Cancelling a PaymentIntent in requires_capture
// releases its hold as Stripe documents it, "automatically refunded": the
// charge shows the whole amount refunded, a refund without the caller's
// metadata is recorded (Refund.Release: it moves no money, and has no
// balance transaction), and charge.refunded is emitted before
// payment_intent.canceled. A hold that lapses (ExpireHold) is released the
// same way, its refund's reason expired_uncaptured_charge, after
// charge.expired. A partial capture's uncaptured rest is counted in the
// charge's amount_refunded only.
//
// The challenge page stands in for the rider's bank. GET
// /_fake/challenge/{id} shows it, with two buttons (ids "complete" and
// "fail") that POST action=complete or action=fail to the same URL; the
// answer is a 303 to the PaymentIntent's return_url with
// payment_intent, payment_intent_client_secret and redirect_status
// (succeeded or failed) appended to its query. A PaymentIntent no longer
// in requires_action gets a 409 page, and nothing changes. The page's URL
// is built from Options.PublicURL, else from the Host of the request that
// confirmed the PaymentIntent. Tests answer it with Authenticate.
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
//	GET    /_fake/challenge/{id}  the challenge page of a PaymentIntent in requires_action
//	POST   /_fake/challenge/{id}  action=complete or action=fail: the page's answer, 303 to return_url
//	POST   /_fake/payment_intents/{id}/authenticate
//	                      {"complete":true} or {"complete":false}: Authenticate, answering the PaymentIntent
//	POST   /_fake/payment_intents/{id}/expire
//	                      let the uncaptured hold lapse (ExpireHold): charge.expired, charge.refunded
//	                      (Stripe's release, reason expired_uncaptured_charge), payment_intent.canceled
package fakestripe
