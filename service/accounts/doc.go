// Package accounts keeps the riders, their API keys and their booking
// sessions: the accounts of the service.
//
// It owns the tables users, api_keys and booking_sessions (and writes
// audit_records through package audit). Its flows:
//
//   - UserUpsert (PUT /users/{email}): one SERIALIZABLE transaction per
//     request creates the rider, an audit record, the first API key and the
//     job that registers the payment source at every processor, or replaces
//     the source of an existing rider; a concurrent duplicate is rerun and
//     finds the rider.
//   - APIKeyMint, APIKeyList, APIKeyRevoke: a rider's keys, stored as their
//     SHA-256 only.
//   - Authenticate: the rider of a live key, from a cache trusted only while
//     ListenAPIKeyRevocations hears the database announce revocations.
//   - BookingSessionCreate, BookingSessionUser, BookingSessionEnd: the
//     booking pages' sessions, each tied to the key that began it.
//
// A Service is built from the idempotency engine (its transactions and
// their retries), River's insert-only client (the customer job, inserted in
// the rider's transaction), a clock and a logger. It calls no other domain
// package: the rider (service.User), the email rule (service.NormalizeEmail)
// and the errors (service.Error) are the domain's shared vocabulary. The
// HTTP adapters (openapi, openapi/web) call it; the processors' registration
// of a source is the customer job's (service.Service.CustomerCreate).
package accounts
