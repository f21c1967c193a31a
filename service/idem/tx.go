package idem

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/atomicrides/atomicrides/internal/retry"
)

// txMaxAttempts bounds the runs of one transaction that keeps failing with
// serialization failures or deadlocks.
const txMaxAttempts = 10

// rollbackTimeout bounds a rollback that runs after the caller's context was
// cancelled.
const rollbackTimeout = 5 * time.Second

// InTx runs fn in one transaction at the given isolation level and commits
// it. A serialization failure or deadlock, at any statement or at commit, or
// a failure Config.Retryable accepts, reruns fn from the start after a
// jittered backoff, so fn must keep no state across runs other than what it
// recomputes. The rollback of a failed run survives a cancelled ctx. The
// transaction sends its BEGIN with fn's first statement and its COMMIT with
// the statement fn sends through CommitWith, if any.
func (e *Engine) InTx(ctx context.Context, iso pgx.TxIsoLevel, fn func(ctx context.Context, tx pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := e.txOnce(ctx, iso, fn)
		if err == nil || !e.isRetryable(err) || attempt >= txMaxAttempts {
			return err
		}
		e.obs.TxRetried()
		traceTxAttempt(ctx, attempt, err)
		if err := retry.Sleep(ctx, retry.Backoff(attempt, 2*time.Millisecond, 200*time.Millisecond)); err != nil {
			return err
		}
	}
}

// txOnce runs fn once in a pipeTx: BEGIN travels with fn's first statement
// and COMMIT with the statement fn sends through CommitWith, if any. The
// connection goes back to the pool only once the transaction has ended; one
// left open (a failed rollback) is closed by the pool.
func (e *Engine) txOnce(ctx context.Context, iso pgx.TxIsoLevel, fn func(ctx context.Context, tx pgx.Tx) error) error {
	conn, err := e.pool.Acquire(ctx)
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

// isRetryable reports whether a transaction that failed with err may
// succeed when run again from its start.
func (e *Engine) isRetryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == sqlStateSerializationFailure || pgErr.Code == sqlStateDeadlockDetected) {
		return true
	}
	return e.retryable(err)
}

const (
	sqlStateSerializationFailure = "40001"
	sqlStateDeadlockDetected     = "40P01"
)
