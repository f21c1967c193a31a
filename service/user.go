package service

import (
	"time"

	"github.com/atomicrides/atomicrides/dbgen"
)

// User is a rider as the API shows it.
type User struct {
	// ID is drawn at random (in [1, 2^53 - 1]) and never names another
	// rider, even in a database restored from a backup.
	ID            int64     `json:"id" doc:"Drawn at random (1 to 2^53 - 1); never names another rider, even after a restore."`
	CreatedAt     time.Time `json:"created_at"`
	Email         string    `json:"email"`
	PaymentSource string    `json:"payment_source"`
	// StripeCustomerID is the Stripe customer of the current payment
	// source, set once it exists at Stripe.
	StripeCustomerID *string `json:"stripe_customer_id" nullable:"true" doc:"The Stripe customer of the rider's current payment source, once Stripe has it; a replaced source has its own customer, so this changes (and is null until the new one is registered)."`
	// Registrations are the rider's current payment source at each
	// processor that answered: registered, or refused with the
	// processor's reason.
	Registrations []Registration `json:"registrations" doc:"The rider's current payment source at each payment processor that has answered: registered, or refused with the processor's reason (the rider must register another source with PUT /users/{email}). A processor not listed has not answered yet; a replaced source starts with none listed."`
}

// UserFromRow is the rider of a users row, with no registrations yet.
func UserFromRow(u *dbgen.User) *User {
	return &User{
		ID:               u.ID,
		CreatedAt:        u.CreatedAt.UTC(),
		Email:            u.Email,
		PaymentSource:    u.PaymentSource,
		StripeCustomerID: u.StripeCustomerID,
		Registrations:    []Registration{},
	}
}
