package service

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/mail"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/dbgen"
)

// DefaultPaymentSource is the payment source of a user created without one:
// the processor's test card that always succeeds.
const DefaultPaymentSource = "tok_visa"

// User is a rider as the API shows it.
type User struct {
	ID            int64     `json:"id"`
	CreatedAt     time.Time `json:"created_at"`
	Email         string    `json:"email"`
	PaymentSource string    `json:"payment_source"`
	// StripeCustomerID is set once the customer exists at the processor.
	StripeCustomerID *string `json:"stripe_customer_id" nullable:"true"`
}

func userFromRow(u *dbgen.User) *User {
	return &User{
		ID:               u.ID,
		CreatedAt:        u.CreatedAt.UTC(),
		Email:            u.Email,
		PaymentSource:    u.PaymentSource,
		StripeCustomerID: u.StripeCustomerID,
	}
}

// UserUpsertParams is the input of UserUpsert.
type UserUpsertParams struct {
	Email string
	// PaymentSource is a processor token or source id; empty means
	// DefaultPaymentSource.
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
}

var paymentSourcePattern = regexp.MustCompile(`^[A-Za-z0-9_]{1,255}$`)

// ValidateEmail checks that email is a plain address of at most 255
// characters.
func ValidateEmail(email string) error {
	if email == "" || len(email) > 255 {
		return invalid("path.email", "must be an email address of 3 to 255 characters")
	}
	addr, err := mail.ParseAddress(email)
	if err != nil || addr.Address != email || addr.Name != "" || !strings.Contains(email, "@") {
		return invalid("path.email", "must be a plain email address like rider@example.com")
	}
	return nil
}

// UserUpsert creates the user unless one with the email exists: the 1:1
// request-to-transaction model. One SERIALIZABLE transaction creates the user,
// an audit record, the first API key and the job that creates the customer at
// the processor; it is rerun on serialization failures, and the UNIQUE email
// is a second line of defence. An existing user is returned unchanged.
func (s *Service) UserUpsert(ctx context.Context, p UserUpsertParams) (*UserUpsertResult, error) {
	if err := ValidateEmail(p.Email); err != nil {
		return nil, err
	}
	if p.PaymentSource == "" {
		p.PaymentSource = DefaultPaymentSource
	}
	if !paymentSourcePattern.MatchString(p.PaymentSource) {
		return nil, invalid("body.payment_source", "must be 1 to 255 letters, digits or underscores, like tok_visa")
	}

	var res *UserUpsertResult
	err := s.inTx(ctx, pgx.Serializable, func(ctx context.Context, tx pgx.Tx) error {
		res = nil
		existing, err := s.queries.UserGetByEmail(ctx, tx, p.Email)
		if err == nil {
			res = &UserUpsertResult{User: userFromRow(existing)}
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
		if _, err := s.jobs.InsertTx(ctx, tx, CustomerCreateArgs{UserID: user.ID}, nil); err != nil {
			return err
		}
		res = &UserUpsertResult{User: userFromRow(user), Created: true, APIKey: apiKey}
		return nil
	})
	if err != nil {
		return nil, internal(err)
	}
	return res, nil
}

// serializationConflict marks a unique violation that a rerun resolves.
type serializationConflict struct{ err error }

func (e *serializationConflict) Error() string { return e.err.Error() }
func (e *serializationConflict) Unwrap() error { return e.err }

// APIKeyMint mints another API key for the user with the email.
func (s *Service) APIKeyMint(ctx context.Context, email string, ip *netip.Addr) (*User, string, error) {
	if err := ValidateEmail(email); err != nil {
		return nil, "", err
	}
	var (
		user *dbgen.User
		key  string
	)
	err := s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		if user, err = s.queries.UserGetByEmail(ctx, tx, email); err != nil {
			return err
		}
		key, err = s.apiKeyCreate(ctx, tx, user.ID, ip)
		return err
	})
	if err != nil {
		if isNoRows(err) {
			return nil, "", &Error{Code: CodeNotFound, Message: "no user with this email"}
		}
		return nil, "", internal(err)
	}
	return userFromRow(user), key, nil
}

// apiKeyPrefix marks the service's API keys, so that a leaked one is
// recognisable.
const apiKeyPrefix = "ark_"

func (s *Service) apiKeyCreate(ctx context.Context, tx pgx.Tx, userID int64, ip *netip.Addr) (string, error) {
	var raw [32]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails
	key := apiKeyPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	row, err := s.queries.APIKeyCreate(ctx, tx, apiKeyHash(key), userID)
	if err != nil {
		return "", err
	}
	return key, s.audit(ctx, tx, "api_key.created", "api_key", row.ID, userID, ip, struct{}{})
}

func apiKeyHash(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

// DefaultAuthCacheTTL is how long Authenticate trusts a key it found in the
// database, unless Config.AuthCacheTTL says otherwise.
const DefaultAuthCacheTTL = 5 * time.Second

// Authenticate returns the user an API key belongs to. A key found in the
// database is trusted for Config.AuthCacheTTL without being read again, so a
// removed key is refused at most that long after; the user returned is as
// read then. The cache is keyed by the key's SHA-256, never the key, and
// holds only keys found: an unknown key is looked up every time.
func (s *Service) Authenticate(ctx context.Context, apiKey string) (*User, error) {
	if !strings.HasPrefix(apiKey, apiKeyPrefix) || len(apiKey) > 128 {
		return nil, errUnauthenticated
	}
	hash := sha256.Sum256([]byte(apiKey))
	if user, ok := s.auth.get(hash, s.now()); ok {
		return &user, nil
	}
	row, err := s.queries.UserGetByAPIKeyHash(ctx, s.pool, hash[:])
	if err != nil {
		if isNoRows(err) {
			return nil, errUnauthenticated
		}
		return nil, internal(err)
	}
	user := userFromRow(row)
	s.auth.put(hash, *user, s.now())
	return user, nil
}

var errUnauthenticated = &Error{Code: CodeUnauthenticated, Message: "a valid API key is required"}

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
