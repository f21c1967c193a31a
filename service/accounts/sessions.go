package accounts

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"strings"
	"time"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/service"
)

// Lifetimes of a booking session: it ends after BookingSessionIdle unused,
// and BookingSessionMaxAge after it began however much it is used.
const (
	BookingSessionIdle   = 12 * time.Hour
	BookingSessionMaxAge = 7 * 24 * time.Hour
)

// bookingSessionPrefix marks session ids, as apiKeyPrefix marks API keys.
const bookingSessionPrefix = "ars_"

// expiredSessionsBatch bounds the expired sessions deleted at each sign-in.
const expiredSessionsBatch = 1000

// BookingSessionCreate signs a rider in to the booking pages with one of
// their API keys, and returns the new session's id: random, shown only to
// the caller (the session cookie), stored as its SHA-256. The key is
// checked as every request's is (AuthenticateKey), and the session belongs
// to it: it ends when the key is revoked or deleted, when the rider signs
// out (BookingSessionEnd), and after BookingSessionIdle unused or
// BookingSessionMaxAge in all. An unknown or revoked key is
// service.CodeUnauthenticated.
func (s *Service) BookingSessionCreate(ctx context.Context, apiKey string) (string, error) {
	_, keyID, err := s.AuthenticateKey(ctx, apiKey)
	if err != nil {
		return "", err
	}
	// Sign-ins sweep what expired, so that the table holds live sessions
	// and a bounded tail of dead ones.
	if _, err := s.queries.BookingSessionDeleteExpired(ctx, s.pool, expiredSessionsBatch); err != nil {
		return "", service.Internal(err)
	}
	id := bookingSessionPrefix + rand.Text()
	idHash := sha256.Sum256([]byte(id))
	err = s.queries.BookingSessionCreate(ctx, s.pool, dbgen.BookingSessionCreateParams{
		IDHash: idHash[:], APIKeyID: keyID, IdleSeconds: BookingSessionIdle.Seconds(),
	})
	if err != nil {
		if service.IsForeignKeyViolation(err) {
			return "", errUnauthenticated // the key was deleted meanwhile
		}
		return "", service.Internal(err)
	}
	return id, nil
}

// BookingSessionUser returns the rider of a live session: not ended, not
// expired, and whose API key is live as APIKeyLive judges it (not revoked).
// It reads the database every time, bypassing the authentication cache, so
// that a revoked key or an ended session is refused at once. Anything else
// is service.CodeUnauthenticated.
func (s *Service) BookingSessionUser(ctx context.Context, sessionID string) (*service.User, error) {
	if !strings.HasPrefix(sessionID, bookingSessionPrefix) || len(sessionID) > 64 {
		return nil, errUnauthenticated
	}
	idHash := sha256.Sum256([]byte(sessionID))
	row, err := s.queries.BookingSessionAuthenticate(ctx, s.pool, dbgen.BookingSessionAuthenticateParams{
		IDHash: idHash[:], MaxAgeSeconds: BookingSessionMaxAge.Seconds(), IdleSeconds: BookingSessionIdle.Seconds(),
	})
	if err != nil {
		if service.IsNoRows(err) {
			return nil, errUnauthenticated
		}
		return nil, service.Internal(err)
	}
	return service.UserFromRow(&row.User), nil
}

// BookingSessionEnd ends a session (signing out); ending an unknown or
// ended session does nothing.
func (s *Service) BookingSessionEnd(ctx context.Context, sessionID string) error {
	idHash := sha256.Sum256([]byte(sessionID))
	if err := s.queries.BookingSessionDelete(ctx, s.pool, idHash[:]); err != nil {
		return service.Internal(err)
	}
	return nil
}
