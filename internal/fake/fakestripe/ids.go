package fakestripe

import "math/rand/v2"

const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newID returns a Stripe-looking id such as "ch_3PgT1uK9ZxQ0aBcd".
func newID(prefix string) string {
	return prefix + "_" + randomString(16)
}

// randomString returns n random letters and digits.
func randomString(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = idAlphabet[rand.IntN(len(idAlphabet))]
	}
	return string(b)
}
