package service

import (
	"context"
	"encoding/json"
	"net/mail"
	"net/netip"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/dbgen"
)

// DefaultPaymentSource is the payment source of a user created without one:
// the processor's test card that always succeeds.
const DefaultPaymentSource = "tok_visa"

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

func userFromRow(u *dbgen.User) *User {
	return &User{
		ID:               u.ID,
		CreatedAt:        u.CreatedAt.UTC(),
		Email:            u.Email,
		PaymentSource:    u.PaymentSource,
		StripeCustomerID: u.StripeCustomerID,
		Registrations:    []Registration{},
	}
}

// UserGet returns the rider with the email, with the registration of the
// rider's card at each processor.
func (s *Service) UserGet(ctx context.Context, email string) (*User, error) {
	email, err := NormalizeEmail(email)
	if err != nil {
		return nil, err
	}
	var out *User
	err = s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		row, err := s.queries.UserGetByEmail(ctx, tx, email)
		if err != nil {
			return err
		}
		out = userFromRow(row)
		regs, err := s.queries.ProcessorRegistrationList(ctx, tx, row.ID)
		if err != nil {
			return err
		}
		out.Registrations = registrationsFromRows(regs)
		return nil
	})
	if err != nil {
		if isNoRows(err) {
			return nil, errNoSuchUser
		}
		return nil, internal(err)
	}
	return out, nil
}

// UserUpsertParams is the input of UserUpsert.
type UserUpsertParams struct {
	Email string
	// PaymentSource is a processor token or source id. Empty is refused
	// (CodeInvalid), except with Config.DevDefaultPaymentSource, where it
	// means DefaultPaymentSource.
	PaymentSource string
	IP            *netip.Addr
}

// UserUpsertResult is the outcome of UserUpsert.
type UserUpsertResult struct {
	User *User
	// Created is true when this call created the user.
	Created bool
	// APIKey is the user's first API key, only when Created. It is not
	// stored and cannot be shown again.
	APIKey string
	// APIKeyID is the id of APIKey, only when Created.
	APIKeyID int64
	// Replaced is true when this call replaced an existing rider's payment
	// source with another.
	Replaced bool
}

var paymentSourcePattern = regexp.MustCompile(`^[A-Za-z0-9_]{1,255}$`)

// Bounds of an email address, in bytes (it is ASCII).
const (
	EmailMinLength = 3
	EmailMaxLength = 255
)

// NormalizeEmail validates a rider's email address and returns the form the
// service stores and compares: lower-cased, so that Alice@Example.COM and
// alice@example.com are one rider (mailboxes are case-insensitive in
// practice, whatever RFC 5321 allows for the local part).
//
// The address must be a plain addr-spec (no display name, no comment, no
// quoting that changes it) of 3 to 255 characters. Control and formatting
// characters (Unicode Cc and Cf, such as U+202E RIGHT-TO-LEFT OVERRIDE) are
// refused, and so is any other non-ASCII character: the service's SMTP client
// does not use the SMTPUTF8 extension, so it could not deliver a receipt to
// such an address. The domain must be a name, not an address literal
// (rider@[192.0.2.1]): a receipt is delivered where the domain's DNS says,
// never to an address a client picked, such as one inside our network;
// and it must be a host name (isHostname): rider@-example.com and
// rider@example_1.com name no host a receipt could be delivered to.
// Every error is CodeInvalid on path.email; the spec's pattern for
// path.email states the same rule.
func NormalizeEmail(email string) (string, error) {
	const field = "path.email"
	for _, r := range email {
		if unicode.In(r, unicode.Cc, unicode.Cf) {
			return "", invalid(field, "must not contain control or formatting characters (found U+%04X)", r)
		}
	}
	for _, r := range email {
		if r > unicode.MaxASCII {
			return "", invalid(field, "must be ASCII: addresses that need SMTPUTF8 (found U+%04X) cannot be delivered", r)
		}
	}
	if len(email) < EmailMinLength || len(email) > EmailMaxLength {
		return "", invalid(field, "must be an email address of 3 to 255 characters")
	}
	addr, err := mail.ParseAddress(email)
	if err != nil || addr.Address != email || addr.Name != "" || !strings.Contains(email, "@") {
		return "", invalid(field, "must be a plain email address like rider@example.com")
	}
	if strings.HasSuffix(email, "]") {
		return "", invalid(field, "must name a domain, not an address in brackets")
	}
	if !isHostname(email[strings.LastIndexByte(email, '@')+1:]) {
		return "", invalid(field, "must name a domain of dot-separated labels of 1 to 63 letters, digits and hyphens, none starting or ending with a hyphen")
	}
	return strings.ToLower(email), nil
}

// isHostname reports whether domain is a host name as DNS and mail
// servers take it (RFC 1123 section 2.1, RFC 5321 section 4.1.2): labels of
// 1 to 63 ASCII letters, digits and hyphens, separated by dots, none
// starting or ending with a hyphen. An internationalized domain is taken in
// its ASCII form (xn--…), as the service's SMTP client sends it. The
// address as a whole is at most EmailMaxLength bytes, which keeps the
// domain within DNS's 253.
func isHostname(domain string) bool {
	for label := range strings.SplitSeq(domain, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// UserUpsert creates the user unless one with the email exists, or
// replaces an existing user's payment source with another: the 1:1
// request-to-transaction model. One SERIALIZABLE transaction creates the
// user, an audit record, the first API key and the job that registers the
// source at every processor; it is rerun on serialization failures, and the
// UNIQUE email is a second line of defence.
//
// An existing user sent its current source (or, under -dev, no source) is
// returned unchanged: nothing is written and nothing registered again. An
// existing user sent another source has it replaced in one transaction
// (replaceSource): the user row, an audit record user.payment_source_replaced
// and the customer job of the new source.
func (s *Service) UserUpsert(ctx context.Context, p UserUpsertParams) (*UserUpsertResult, error) {
	email, err := NormalizeEmail(p.Email)
	if err != nil {
		return nil, err
	}
	p.Email = email
	defaulted := false
	if p.PaymentSource == "" {
		if !s.devSource {
			return nil, invalid("body.payment_source", "is required: a payment processor token or source id, like tok_visa")
		}
		p.PaymentSource, defaulted = DefaultPaymentSource, true
	}
	if !paymentSourcePattern.MatchString(p.PaymentSource) {
		return nil, invalid("body.payment_source", "must be 1 to 255 letters, digits or underscores, like tok_visa")
	}

	var res *UserUpsertResult
	err = s.inTx(ctx, pgx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		res = nil
		existing, err := s.queries.UserGetByEmail(ctx, tx, p.Email)
		if err == nil {
			if existing.PaymentSource != p.PaymentSource && !defaulted {
				existing, err = s.replaceSource(ctx, tx, existing, p)
				if err != nil {
					return err
				}
				res = &UserUpsertResult{User: userFromRow(existing), Replaced: true}
			} else {
				res = &UserUpsertResult{User: userFromRow(existing)}
			}
			regs, err := s.queries.ProcessorRegistrationList(ctx, tx, existing.ID)
			if err != nil {
				return err
			}
			res.User.Registrations = registrationsFromRows(regs)
			return nil
		}
		if !isNoRows(err) {
			return err
		}
		user, err := s.queries.UserCreate(ctx, tx, p.Email, p.PaymentSource)
		if err != nil {
			if sqlState(err) == sqlStateUniqueViolation {
				// A concurrent transaction created the user first; SERIALIZABLE
				// reports it as a serialization failure in most orders, and the
				// constraint in the rest. Either way, the rerun finds the user.
				return &serializationConflict{err}
			}
			return err
		}
		if err := s.audit(ctx, tx, "user.created", "user", user.ID, user.ID, p.IP,
			map[string]string{"email": user.Email}); err != nil {
			return err
		}
		apiKey, err := s.apiKeyCreate(ctx, tx, user.ID, p.IP)
		if err != nil {
			return err
		}
		if _, err := s.jobs.InsertTx(ctx, tx, CustomerCreateArgs{UserID: user.ID, PaymentSource: user.PaymentSource}, nil); err != nil {
			return err
		}
		res = &UserUpsertResult{User: userFromRow(user), Created: true, APIKey: apiKey.Secret, APIKeyID: apiKey.ID}
		return nil
	})
	if err != nil {
		return nil, internal(err)
	}
	return res, nil
}

// replaceSource makes p.PaymentSource the rider's payment source, in the
// caller's transaction, and returns the updated rider. The new source is a
// new registration at every processor, under its own entity-level key
// (CustomerKey of the source), by the customer job inserted here; until the
// job (or a booking) hears from a processor, the rider has no registration
// there. A source the rider had before keeps the answers the processors
// gave it, so nothing is registered again for it. Rides already booked keep
// the source they were routed with (rides.payment_source): a booking in
// flight is charged with the old source, a new booking with the new one.
func (s *Service) replaceSource(ctx context.Context, tx pgx.Tx, user *dbgen.User, p UserUpsertParams) (*dbgen.User, error) {
	updated, err := s.queries.UserReplacePaymentSource(ctx, tx, p.PaymentSource, user.ID)
	if err != nil {
		if sqlState(err) == sqlStateUniqueViolation {
			return nil, &serializationConflict{err}
		}
		return nil, err
	}
	if err := s.audit(ctx, tx, "user.payment_source_replaced", "user", user.ID, user.ID, p.IP,
		map[string]string{"from": user.PaymentSource, "to": updated.PaymentSource}); err != nil {
		return nil, err
	}
	if _, err := s.jobs.InsertTx(ctx, tx, CustomerCreateArgs{UserID: user.ID, PaymentSource: updated.PaymentSource}, nil); err != nil {
		return nil, err
	}
	return updated, nil
}

// serializationConflict marks a unique violation that a rerun resolves.
type serializationConflict struct{ err error }

func (e *serializationConflict) Error() string { return e.err.Error() }
func (e *serializationConflict) Unwrap() error { return e.err }

// audit records what happened to a resource, in the caller's transaction.
func (s *Service) audit(ctx context.Context, tx pgx.Tx, action, resourceType string, resourceID, userID int64, ip *netip.Addr, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	_, err = s.queries.AuditRecordCreate(ctx, tx, dbgen.AuditRecordCreateParams{
		Action: action, Data: b, OriginIP: ip, ResourceID: resourceID, ResourceType: resourceType, UserID: userID,
	})
	return err
}
