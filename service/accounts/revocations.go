package accounts

import (
	"context"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/atomicrides/atomicrides/internal/retry"
	"github.com/atomicrides/atomicrides/internal/ttlcache"
)

// revocationChannel is where the database announces API keys that stop
// authenticating (revoked or deleted), with the key's SHA-256 in hex; the
// triggers are in migration 0004.
const revocationChannel = "api_key_revoked"

// revocationApplicationName names the listener's connection in
// pg_stat_activity.
const revocationApplicationName = "atomicrides api key revocations"

const (
	// revocationPingInterval is how long the listener waits for a
	// notification before it checks that its connection still answers.
	revocationPingInterval = 250 * time.Millisecond
	// revocationMaxSilence bounds how long the authentication cache is
	// trusted without word from the listener's connection. A connection that
	// dies silently (a network partition) can lose notifications; past this
	// bound every key is read from the database again, so a revocation is
	// honoured within about this long even then.
	revocationMaxSilence = time.Second
)

// revocationWatch decides whether the authentication cache may be trusted,
// and evicts what it must not trust any more.
//
// The cache is trusted only while the listener is connected and heard from
// its connection within revocationMaxSilence. Every eviction bumps epoch, and
// an entry is put only if epoch did not move since before the database read
// that found it: a key read just before its revocation committed, whose
// notification arrived before the put, is not remembered.
type revocationWatch struct {
	cache *ttlcache.Cache[[32]byte, authEntry]
	start time.Time // origin of heard, a monotonic clock reading

	mu        sync.Mutex // serialises puts with evictions
	epoch     atomic.Uint64
	connected atomic.Bool
	heard     atomic.Int64 // time.Since(start) when the connection last answered
}

func newRevocationWatch(cache *ttlcache.Cache[[32]byte, authEntry]) *revocationWatch {
	return &revocationWatch{cache: cache, start: time.Now()}
}

// trusted reports whether cached keys may be used, with the epoch to give
// remember for a key read from the database after this call.
func (w *revocationWatch) trusted() (uint64, bool) {
	epoch := w.epoch.Load()
	if !w.connected.Load() {
		return epoch, false
	}
	silence := time.Since(w.start) - time.Duration(w.heard.Load())
	return epoch, silence < revocationMaxSilence
}

// remember caches e under hash unless something was evicted since epoch was
// read or the cache is not trusted.
func (w *revocationWatch) remember(epoch uint64, hash [32]byte, e authEntry, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if current, ok := w.trusted(); ok && current == epoch {
		w.cache.Put(hash, e, now)
	}
}

// forget evicts the key with hash, or every key when hash is nil.
func (w *revocationWatch) forget(hash *[32]byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.epoch.Add(1)
	if hash == nil {
		w.cache.Clear()
		return
	}
	w.cache.Delete(*hash)
}

// listening marks the listener connected and heard from now, with an empty
// cache: what was cached before it listened may have missed a notification.
func (w *revocationWatch) listening() {
	w.forget(nil)
	w.heardNow()
	w.connected.Store(true)
}

// lost marks the listener disconnected and empties the cache.
func (w *revocationWatch) lost() {
	w.connected.Store(false)
	w.forget(nil)
}

func (w *revocationWatch) heardNow() { w.heard.Store(int64(time.Since(w.start))) }

// APIKeyCacheTrusted reports whether Authenticate may answer from its cache:
// the revocation listener is connected and heard from its connection within
// the last second. While it is false, every key is read from the database.
func (s *Service) APIKeyCacheTrusted() bool {
	_, ok := s.revocations.trusted()
	return ok
}

// ListenAPIKeyRevocations listens for API key revocations on a connection of
// its own (not one of the pool's; see Config.ListenConfig) until ctx is done, then returns nil. Each
// revocation announced by the database evicts the key from this instance's
// authentication cache, so a key revoked on any instance is refused here
// within about a second. While it is not connected (before it first connects,
// and from the moment its connection fails until it has reconnected and
// listens again) the cache is not used at all. Run it once per Service, for
// as long as the Service serves requests.
func (s *Service) ListenAPIKeyRevocations(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		listened, err := s.listenRevocations(ctx)
		s.revocations.lost()
		if ctx.Err() != nil {
			return nil
		}
		if listened {
			attempt = 1
		}
		s.logger.WarnContext(ctx, "api key revocation listener: connection lost; every API key is read from the database until it reconnects",
			"err", err, "attempt", attempt)
		if retry.Sleep(ctx, retry.Backoff(attempt, 50*time.Millisecond, 5*time.Second)) != nil {
			return nil
		}
	}
}

// listenRevocations serves one connection until it fails. listened reports
// whether it got as far as listening.
func (s *Service) listenRevocations(ctx context.Context) (listened bool, err error) {
	cfg := s.listenConfig.Copy()
	cfg.RuntimeParams["application_name"] = revocationApplicationName
	// A wait that times out only interrupts the read: the connection stays
	// usable, and no cancel request is sent to the server every interval.
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	connectCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(connectCtx, cfg)
	cancel()
	if err != nil {
		return false, err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+revocationChannel); err != nil {
		return false, err
	}
	s.revocations.listening()
	for {
		waitCtx, cancel := context.WithTimeout(ctx, revocationPingInterval)
		n, err := conn.WaitForNotification(waitCtx)
		timedOut := waitCtx.Err() != nil
		cancel()
		switch {
		case err == nil:
			s.revocations.heardNow()
			s.forgetAnnounced(n.Payload)
		case ctx.Err() != nil:
			return true, ctx.Err()
		case timedOut && !conn.IsClosed():
			// Silence: prove that the connection still answers. Whatever was
			// announced before the server answered is read before the answer
			// and handled at the next wait.
			pingCtx, cancel := context.WithTimeout(ctx, revocationMaxSilence)
			err := conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return true, err
			}
			s.revocations.heardNow()
		default:
			return true, err
		}
	}
}

// forgetAnnounced evicts the key of a notification's payload; a payload that
// is not a key's hash empties the cache.
func (s *Service) forgetAnnounced(payload string) {
	var hash [32]byte
	if b, err := hex.DecodeString(payload); err == nil && len(b) == len(hash) {
		copy(hash[:], b)
		s.revocations.forget(&hash)
		return
	}
	s.revocations.forget(nil)
}
