package service

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
)

// Every processor idempotency key and every tag the service sends is a pure
// function of the durable client request: the deployment's namespace (made
// with the database, kept in it), the rider's email (the rider the client
// means, whatever the database numbered it) and the client's own
// idempotency key — never an id the database made for a lost commit. A
// database restored from a backup, or a standby promoted while behind,
// therefore sends the very same request to the processor for the same
// client request (and the processor answers with what it did), and a
// different request for a different one. Two deployments sharing one
// processor account differ by namespace.

// Prefixes of the processor keys, so that an operator reading the
// processor's logs knows which object a key made.
const (
	processorKeyCharge   = "ar-ch-"
	processorKeyCustomer = "ar-cu-"
	processorKeyRefund   = "ar-rf-"
	processorKeyCancel   = "ar-cx-"
	processorKeyDetails  = "ar-dt-"
	processorKeyCapture  = "ar-cp-"
	processorKeyExtra    = "ar-ex-"
	processorKeyRelease  = "ar-rl-"
	processorKeyBalance  = "ar-bl-"
)

// digest is the SHA-256, in hex, of the parts, each length-prefixed so that
// no two different lists of parts share an encoding.
func digest(parts ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// riderRef identifies a rider at the processor (metadata ar_rider): the
// rider's email, digested with the namespace so that no address is written
// on charges.
func riderRef(namespace, email string) string { return digest("rider", namespace, email)[:32] }

// ChargeKey is the processor key of the charge of the client's request
// clientKey by the rider with email, in the deployment namespace: what an
// operator searches the processor for (metadata ar_key) to find the charge
// of a client's request.
func ChargeKey(namespace, email, clientKey string) string {
	return processorKeyCharge + digest("charge", namespace, email, clientKey)
}

// chargeIdempotencyKey is the processor idempotency key of a charge: the
// request's ChargeKey, qualified by the customer charged. The customer is
// itself a pure function of the rider (made under CustomerKey, or adopted
// by it), so it changes only when the processor no longer knows the
// customer (deleted in the dashboard, an account of another mode): an
// attempt against such a customer could not charge, and the attempt with
// the customer that replaces it is a new request, not an idempotency
// conflict that would block the rider until the processor forgets the
// key. Charges are still found by ChargeKey (metadata ar_key), whatever
// the customer.
func chargeIdempotencyKey(chargeKey, customerID string) string { return chargeKey + "." + customerID }

// CustomerKey is the entity-level processor key of the rider's customer
// (at Stripe) or stored card (at Adyen) for one payment source: every path
// that registers that source uses it with the same parameters, so the
// processor makes one customer per rider, source and deployment. It is
// derived from the source itself, never from a generation our database
// counts: a rider who replaces source A by B gets a new key (a new
// registration), and one who comes back to A sends A's key again and is
// answered with the customer made for A. A ride charged with A after the
// rider moved to B still finds A's customer under this key.
func CustomerKey(namespace, email, source string) string {
	return processorKeyCustomer + digest("customer", namespace, email, source)
}

// RefundKey is the processor key of the refund of chargeID: one per attempt,
// where the attempt is raised only after a recorded refusal, so requests
// under different client keys converge on one refund while a refused refund
// asked for again reaches the processor again.
func RefundKey(namespace, chargeID string, attempt int32) string {
	return processorKeyRefund + digest("refund", namespace, chargeID, strconv.FormatInt(int64(attempt), 10))
}

// tag is the metadata of an object made for the rider with email under the
// processor key key.
func (s *Service) tag(email, key string) Tag {
	return Tag{Namespace: s.namespace, Rider: riderRef(s.namespace, email), Key: key}
}

// owns reports whether an object found at the processor was made by this
// deployment for the rider with email: only such an object may be adopted.
func (s *Service) owns(t Tag, email string) bool {
	return t.Namespace == s.namespace && t.Rider == riderRef(s.namespace, email)
}
