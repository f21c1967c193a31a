package accounts

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/netip"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/audit"
)

// apiKeyPrefix marks the service's API keys, so that a leaked one is
// recognisable.
const apiKeyPrefix = "ark_"

// APIKey describes a rider's API key without its secret, which is never
// stored: only its SHA-256 is.
type APIKey struct {
	// ID is drawn at random (in [1, 2^53 - 1]) and never names another
	// key, even in a database restored from a backup.
	ID        int64     `json:"id" doc:"Drawn at random (1 to 2^53 - 1); never names another key, even after a restore."`
	CreatedAt time.Time `json:"created_at"`
	// LastUsedAt is when the key last authenticated a request, to within a
	// minute (the use is recorded at most once a minute per key); nil if
	// never.
	LastUsedAt *time.Time `json:"last_used_at" nullable:"true" doc:"When the key last authenticated a request, to within a minute; null if never."`
	// RevokedAt is when the key was revoked; nil while it is live.
	RevokedAt *time.Time `json:"revoked_at" nullable:"true" doc:"When the key was revoked; null while it is live."`
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// MintedAPIKey is a new API key: its secret, shown once, and its id, by which
// it is listed and revoked.
type MintedAPIKey struct {
	ID int64
	// Secret is the bearer credential. It is not stored and cannot be shown
	// again.
	Secret string
}

// APIKeyMint mints another API key for the user with the email.
func (s *Service) APIKeyMint(ctx context.Context, email string, ip *netip.Addr) (*service.User, *MintedAPIKey, error) {
	email, err := service.NormalizeEmail(email)
	if err != nil {
		return nil, nil, err
	}
	var (
		user *dbgen.User
		key  *MintedAPIKey
	)
	err = s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		if user, err = s.queries.UserGetByEmail(ctx, tx, email); err != nil {
			return err
		}
		key, err = s.apiKeyCreate(ctx, tx, user.ID, ip)
		return err
	})
	if err != nil {
		if service.IsNoRows(err) {
			return nil, nil, errNoSuchUser
		}
		return nil, nil, service.Internal(err)
	}
	return service.UserFromRow(user), key, nil
}

var errNoSuchUser = &service.Error{Code: service.CodeNotFound, Message: "no user with this email"}

// APIKeyList returns every API key of the user with the email, revoked ones
// included, oldest first. No secret is ever returned.
func (s *Service) APIKeyList(ctx context.Context, email string) ([]*APIKey, error) {
	email, err := service.NormalizeEmail(email)
	if err != nil {
		return nil, err
	}
	var keys []*APIKey
	err = s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		user, err := s.queries.UserGetByEmail(ctx, tx, email)
		if err != nil {
			return err
		}
		rows, err := s.queries.APIKeyList(ctx, tx, user.ID)
		if err != nil {
			return err
		}
		keys = make([]*APIKey, 0, len(rows))
		for _, r := range rows {
			keys = append(keys, &APIKey{ID: r.ID, CreatedAt: r.CreatedAt.UTC(), LastUsedAt: utcPtr(r.LastUsedAt), RevokedAt: utcPtr(r.RevokedAt)})
		}
		return nil
	})
	if err != nil {
		if service.IsNoRows(err) {
			return nil, errNoSuchUser
		}
		return nil, service.Internal(err)
	}
	return keys, nil
}

// APIKeyRevoke revokes the API key with id of the user with the email. Once
// it returns, no instance whose revocation listener is running accepts the
// key again (each hears of it when the revocation commits). Revoking a
// revoked key succeeds and changes nothing; an unknown key, or another
// user's, is service.CodeNotFound.
func (s *Service) APIKeyRevoke(ctx context.Context, email string, id int64, ip *netip.Addr) error {
	email, err := service.NormalizeEmail(email)
	if err != nil {
		return err
	}
	err = s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		user, err := s.queries.UserGetByEmail(ctx, tx, email)
		if err != nil {
			return err
		}
		row, err := s.queries.APIKeyRevoke(ctx, tx, id, user.ID)
		if service.IsNoRows(err) {
			// Already revoked, or not this user's key at all.
			_, err = s.queries.APIKeyGetForUser(ctx, tx, id, user.ID)
			return err
		}
		if err != nil {
			return err
		}
		return audit.Record(ctx, tx, "api_key.revoked", "api_key", row.ID, user.ID, ip, struct{}{})
	})
	if err != nil {
		if service.IsNoRows(err) {
			return &service.Error{Code: service.CodeNotFound, Message: "no such API key for this user"}
		}
		return service.Internal(err)
	}
	// This instance refuses the key from now on, without waiting for the
	// notification: its cache is emptied (revocations are rare, and the
	// cache is keyed by hashes this call does not know).
	s.revocations.forget(nil)
	return nil
}

// APIKeyLive reports whether the API key with id still authenticates: it
// exists and is not revoked. It always reads the database, so callers that
// hold a key's id for longer than a request (booking-page sessions) learn of
// a revocation at once.
func (s *Service) APIKeyLive(ctx context.Context, id int64) (bool, error) {
	live, err := s.queries.APIKeyLive(ctx, s.pool, id)
	if err != nil {
		return false, service.Internal(err)
	}
	return live, nil
}

func (s *Service) apiKeyCreate(ctx context.Context, tx pgx.Tx, userID int64, ip *netip.Addr) (*MintedAPIKey, error) {
	var raw [32]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails
	key := apiKeyPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	row, err := s.queries.APIKeyCreate(ctx, tx, apiKeyHash(key), userID)
	if err != nil {
		return nil, err
	}
	if err := audit.Record(ctx, tx, "api_key.created", "api_key", row.ID, userID, ip, struct{}{}); err != nil {
		return nil, err
	}
	return &MintedAPIKey{ID: row.ID, Secret: key}, nil
}

func apiKeyHash(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

// authEntry is what the authentication cache holds of a live key.
type authEntry struct {
	user  service.User
	keyID int64
}

// Authenticate returns the user a live API key belongs to.
//
// A key found in the database is trusted for Config.AuthCacheTTL without
// being read again, but only while the revocation listener
// (ListenAPIKeyRevocations) is connected and has heard from the database
// within the last second: a revoked key is forgotten as soon as its
// notification arrives, and without a listener every call reads the
// database. The user returned is as read then. The cache is keyed by the
// key's SHA-256, never the key, and holds only live keys: an unknown or
// revoked key is looked up every time.
func (s *Service) Authenticate(ctx context.Context, apiKey string) (*service.User, error) {
	user, _, err := s.AuthenticateKey(ctx, apiKey)
	return user, err
}

// AuthenticateKey is Authenticate that also returns the id of the key, for
// callers that remember a sign-in and check it with APIKeyLive later.
func (s *Service) AuthenticateKey(ctx context.Context, apiKey string) (*service.User, int64, error) {
	if !strings.HasPrefix(apiKey, apiKeyPrefix) || len(apiKey) > 128 {
		return nil, 0, errUnauthenticated
	}
	hash := sha256.Sum256([]byte(apiKey))
	epoch, trusted := s.revocations.trusted()
	if trusted {
		if e, ok := s.auth.Get(hash, s.now()); ok {
			return &e.user, e.keyID, nil
		}
	}
	row, err := s.queries.APIKeyAuthenticate(ctx, s.pool, hash[:])
	if err != nil {
		if service.IsNoRows(err) {
			return nil, 0, errUnauthenticated
		}
		return nil, 0, service.Internal(err)
	}
	user := service.UserFromRow(&row.User)
	s.revocations.remember(epoch, hash, authEntry{user: *user, keyID: row.APIKeyID}, s.now())
	return user, row.APIKeyID, nil
}

var errUnauthenticated = &service.Error{Code: service.CodeUnauthenticated, Message: "a valid API key is required"}
