package service

// ChargeIdempotencyKey is the processor idempotency key of a booking's
// charge, for tests that stand in for an earlier release's call.
var ChargeIdempotencyKey = chargeIdempotencyKey

// RideTag is the tag s writes on the charge of a booking by email under the
// processor key pkey.
func RideTag(s *Service, email, pkey string) Tag { return s.tag(email, pkey) }

// RideDescription is the description of every ride's charge.
const RideDescription = rideDescription
