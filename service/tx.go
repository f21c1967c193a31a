package service

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
)

// txMaxAttempts bounds the runs of one transaction that keeps failing with
// serialization failures or deadlocks.
const txMaxAttempts = 10

// rollbackTimeout bounds a rollback that runs after the caller's context was
// cancelled.
const rollbackTimeout = 5 * time.Second

// inTx runs fn in one transaction at the given isolation level and commits it.
// A serialization failure or deadlock, at any statement or at commit, or a
// random id that the database drew a second time (isIDCollision), reruns fn
// from the start after a jittered backoff, so fn must keep no state across
// runs other than what it recomputes. The rollback of a failed run survives a
// cancelled ctx.
func (s *Service) inTx(ctx context.Context, iso pgx.TxIsoLevel, fn func(ctx context.Context, tx pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := s.txOnce(ctx, iso, fn)
		if err == nil || !isRetryable(err) || attempt >= txMaxAttempts {
			return err
		}
		s.metrics.txRetry()
		traceTxAttempt(ctx, attempt, err)
		if err := sleepCtx(ctx, backoff(attempt, 2*time.Millisecond, 200*time.Millisecond)); err != nil {
			return err
		}
	}
}

// txOnce runs fn once in a pipeTx: BEGIN travels with fn's first statement
// and COMMIT with the statement fn sends through commitWith, if any. The
// connection goes back to the pool only once the transaction has ended; one
// left open (a failed rollback) is closed by the pool.
func (s *Service) txOnce(ctx context.Context, iso pgx.TxIsoLevel, fn func(ctx context.Context, tx pgx.Tx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	tx := &pipeTx{conn: conn, begin: beginSQL(iso)}
	defer rollback(ctx, tx)
	if err := fn(ctx, tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// rollback rolls tx back unless it has already ended, even when ctx is done.
func rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(ctx) // ErrTxClosed after a commit; other errors close the connection
}

// backoff is exponential with full jitter: a random duration in
// [0, min(max, base*2^attempt)).
func backoff(attempt int, base, max time.Duration) time.Duration {
	d := base << min(attempt, 20)
	if d <= 0 || d > max {
		d = max
	}
	return rand.N(d) + time.Microsecond
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
