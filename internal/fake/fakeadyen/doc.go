// Package fakeadyen is a stateful, in-memory stand-in for the subset of
// Adyen's Checkout API (v71) that the adyen adapter uses: storing a
// shopper's card (POST /storedPaymentMethods), paying with a stored card
// (POST /payments) and refunding a payment (POST
// /payments/{pspReference}/refunds).
//
// It keeps a ledger (stored cards, payments with their result codes,
// refunds) and honours the Idempotency-Key header as Adyen documents it:
// the first answer to a key is saved and returned again for the same key
// (with the Idempotency-Key echoed), a key still being processed answers
// 409, and keys are kept for 31 days. Requests need an X-API-Key.
//
// # Test tokens
//
// The encrypted card number given when a card is stored decides how it
// behaves:
//
//	tok_chargeDeclined, tok_chargeDeclinedInsufficientFunds, and any source not
//	starting with tok_, pm_, card_, src_ or adyenjs_   storing fails: 422 errorCode 101 "Invalid card number"
//	tok_chargeCustomerFail                     stored; every payment with it is Refused
//	any other tok_, pm_, card_ or src_         stored with a working card
//	adyenjs_… (EncryptedCardPrefix)            stored with a working card (the fake Stripe refuses it)
//
// # Faults
//
// Inject makes the server misbehave for one operation (OpStore,
// OpPayment, OpRefund or OpAny): an error status without executing, a
// connection dropped before or after the operation executed (after: the
// payment is made and its answer saved under the key, the answer lost), a
// refusal (resultCode Refused, saved under the key) or latency.
// SetOutage(true) answers every API request 503 without executing it,
// until SetOutage(false).
package fakeadyen
