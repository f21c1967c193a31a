// Package fakeadyen is a stateful, in-memory stand-in for the subset of
// Adyen's Checkout API (v71) that the adyen adapter uses: storing a
// shopper's card (POST /storedPaymentMethods), paying with a stored card
// (POST /payments), finishing a payment its shopper authenticated (POST
// /payments/details), refunding a payment (POST
// /payments/{pspReference}/refunds), cancelling one (POST /cancels by
// merchant reference, POST /payments/{pspReference}/cancels) and capturing
// a manual-capture authorisation (POST /payments/{pspReference}/captures).
//
// It keeps a ledger (stored cards, payments with their result codes,
// refunds, cancels and captures) and honours the Idempotency-Key header
// as Adyen documents it: the first answer to a key is saved and returned
// again for the same key (with the Idempotency-Key echoed), a key still
// being processed answers 409, and keys are kept for 31 days. Requests
// need an X-API-Key.
//
// # Test tokens
//
// The encrypted card number given when a card is stored decides how it
// behaves:
//
//	tok_chargeDeclined, tok_chargeDeclinedInsufficientFunds, and any source not
//	starting with tok_, pm_, card_, src_ or adyenjs_   storing fails: 422 errorCode 101 "Invalid card number"
//	tok_chargeCustomerFail                     stored; every payment with it is Refused
//	tok_authenticationRequired,                stored; the bank asks for authentication on every
//	pm_card_authenticationRequired,            payment (below), then authorises it
//	tok_authenticationRequiredOnSetup,
//	pm_card_authenticationRequiredOnSetup,     the same: no card is ever set up here, so none is exempt
//	tok_threeDSecure2Required,
//	pm_card_threeDSecure2Required              the same
//	tok_authenticationRequiredChargeDeclinedInsufficientFunds,
//	pm_card_authenticationRequiredChargeDeclinedInsufficientFunds
//	                                           stored; authentication, then Refused "Not enough balance" (12)
//	any other tok_, pm_, card_ or src_         stored with a working card
//	adyenjs_authenticationRequired             stored; authentication, as tok_authenticationRequired (the fake Stripe refuses it)
//	adyenjs_… (EncryptedCardPrefix)            stored with a working card (the fake Stripe refuses it)
//
// # Authentication (3-D Secure)
//
// A payment with a card that needs authentication depends on who is
// there. With the shopper present (shopperInteraction Ecommerce, Adyen's
// default) it needs a returnUrl (else 422, errorCode 130) and is answered
// resultCode RedirectShopper with a redirect action to the challenge page
// (GET /_fake/challenge/{id}, built on Options.PublicURL or the request's
// Host) and no pspReference: the payment has one, told with its outcome.
// The page's Complete and Fail buttons decide the payment (Authorised, or
// Refused "3D Not Authenticated" (11), or "Not enough balance" (12) for
// the card that declines), notify its AUTHORISATION and send the browser
// back (303) to the returnUrl with redirectResult appended; POST
// /payments/details with that redirectResult answers the outcome, the same
// each time it is asked (a redirectResult the fake never issued: 422).
// Authenticate does what the buttons do, for tests. Without the shopper
// (ContAuth) such a payment is Refused "Authentication required" (38).
//
// # Cancels and captures
//
// A cancel or capture is answered 201 with status "received"; its outcome
// comes in a notification (success true or false, with a reason): CAPTURE
// for a capture, CANCELLATION for a cancel by pspReference,
// TECHNICAL_CANCEL for a cancel by merchant reference (POST /cancels). A cancel succeeds on a payment waiting for
// authentication (its challenge page then answers 409) and on a
// manual-capture authorisation (additionalData.manualCapture "true") not
// yet captured: either becomes Cancelled. A capture succeeds once on a
// manual-capture authorisation, for at most the authorised amount.
// FailCapture fails a capture after its CAPTURE (success true), as a card
// scheme's rejection does: a CAPTURE_FAILED notification follows.
//
// # Faults
//
// Inject makes the server misbehave for one operation (OpStore,
// OpPayment, OpRefund, OpDetails, OpCancel, OpCapture or OpAny): an error status without executing, a
// connection dropped before or after the operation executed (after: the
// payment is made and its answer saved under the key, the answer lost), a
// refusal (resultCode Refused, saved under the key) or latency.
// SetOutage(true) answers every API request 503 without executing it,
// until SetOutage(false).
package fakeadyen
