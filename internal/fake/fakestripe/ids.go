package fakestripe

import "math/rand/v2"

const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newID returns a Stripe-looking id such as "ch_3PgT1uK9ZxQ0aBcd".
func newID(prefix string) string {
	b := make([]byte, 0, len(prefix)+1+16)
	b = append(b, prefix...)
	b = append(b, '_')
	for range 16 {
		b = append(b, idAlphabet[rand.IntN(len(idAlphabet))])
	}
	return string(b)
}
