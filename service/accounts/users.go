package accounts

import (
	"context"
	"net/netip"
	"regexp"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/audit"
)

// DefaultPaymentSource is the payment source of a user created without one:
// the processor's test card that always succeeds.
const DefaultPaymentSource = "tok_visa"

// UserGet returns the rider with the email, with the registration of the
// rider's card at each processor.
func (s *Service) UserGet(ctx context.Context, email string) (*service.User, error) {
	email, err := service.NormalizeEmail(email)
	if err != nil {
		return nil, err
	}
	var out *service.User
	err = s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		row, err := s.queries.UserGetByEmail(ctx, tx, email)
		if err != nil {
			return err
		}
		out = service.UserFromRow(row)
		regs, err := s.queries.ProcessorRegistrationList(ctx, tx, row.ID)
		if err != nil {
			return err
		}
		out.Registrations = service.RegistrationsFromRows(regs)
		return nil
	})
	if err != nil {
		if service.IsNoRows(err) {
			return nil, errNoSuchUser
		}
		return nil, service.Internal(err)
	}
	return out, nil
}

// UserUpsertParams is the input of UserUpsert.
type UserUpsertParams struct {
	Email string
	// PaymentSource is a processor token or source id. Empty is refused
	// (service.CodeInvalid), except with Config.DevDefaultPaymentSource, where it
	// means DefaultPaymentSource.
	PaymentSource string
	IP            *netip.Addr
}

// UserUpsertResult is the outcome of UserUpsert.
type UserUpsertResult struct {
	User *service.User
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
	email, err := service.NormalizeEmail(p.Email)
	if err != nil {
		return nil, err
	}
	p.Email = email
	defaulted := false
	if p.PaymentSource == "" {
		if !s.devSource {
			return nil, service.Invalid("body.payment_source", "is required: a payment processor token or source id, like tok_visa")
		}
		p.PaymentSource, defaulted = DefaultPaymentSource, true
	}
	if !paymentSourcePattern.MatchString(p.PaymentSource) {
		return nil, service.Invalid("body.payment_source", "must be 1 to 255 letters, digits or underscores, like tok_visa")
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
				res = &UserUpsertResult{User: service.UserFromRow(existing), Replaced: true}
			} else {
				res = &UserUpsertResult{User: service.UserFromRow(existing)}
			}
			regs, err := s.queries.ProcessorRegistrationList(ctx, tx, existing.ID)
			if err != nil {
				return err
			}
			res.User.Registrations = service.RegistrationsFromRows(regs)
			return nil
		}
		if !service.IsNoRows(err) {
			return err
		}
		user, err := s.queries.UserCreate(ctx, tx, p.Email, p.PaymentSource)
		if err != nil {
			if service.IsUniqueViolation(err) {
				// A concurrent transaction created the user first; SERIALIZABLE
				// reports it as a serialization failure in most orders, and the
				// constraint in the rest. Either way, the rerun finds the user.
				return service.RetryableConflict(err)
			}
			return err
		}
		if err := audit.Record(ctx, tx, "user.created", "user", user.ID, user.ID, p.IP,
			map[string]string{"email": user.Email}); err != nil {
			return err
		}
		apiKey, err := s.apiKeyCreate(ctx, tx, user.ID, p.IP)
		if err != nil {
			return err
		}
		if _, err := s.jobs.InsertTx(ctx, tx, service.CustomerCreateArgs{UserID: user.ID, PaymentSource: user.PaymentSource}, nil); err != nil {
			return err
		}
		res = &UserUpsertResult{User: service.UserFromRow(user), Created: true, APIKey: apiKey.Secret, APIKeyID: apiKey.ID}
		return nil
	})
	if err != nil {
		return nil, service.Internal(err)
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
		if service.IsUniqueViolation(err) {
			return nil, service.RetryableConflict(err)
		}
		return nil, err
	}
	if err := audit.Record(ctx, tx, "user.payment_source_replaced", "user", user.ID, user.ID, p.IP,
		map[string]string{"from": user.PaymentSource, "to": updated.PaymentSource}); err != nil {
		return nil, err
	}
	if _, err := s.jobs.InsertTx(ctx, tx, service.CustomerCreateArgs{UserID: user.ID, PaymentSource: updated.PaymentSource}, nil); err != nil {
		return nil, err
	}
	return updated, nil
}
