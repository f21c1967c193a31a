package idem

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/internal/retry"
	"github.com/atomicrides/atomicrides/internal/ttlcache"
)

// Run serves req with flow: a replay of the key's stored response, a
// refusal (ErrKeyReused, *KeyInUseError), or a claim of the key and its
// drive from its recovery point as far as it goes. The work goes on when
// ctx is cancelled (the client went away), bounded by the lease. An error
// of a Load, Call or Phase is returned as it is, the key released at its
// recovery point, for a retry to continue from.
func Run[S any](ctx context.Context, e *Engine, flow *Flow[S], req Request) (*Response, error) {
	params, fp, err := requestForm(req)
	if err != nil {
		return nil, err
	}
	return serve(ctx, e, flow, req, params, fp)
}

// Replay answers req from memory when this engine saw its key finish
// lately, without a database round trip: the stored response (ok), or
// ErrKeyReused for another request under the key. ok is false when the
// key is not in memory; the request then goes to Run.
func Replay[S any](e *Engine, flow *Flow[S], req Request) (resp *Response, ok bool, err error) {
	_, fp, err := requestForm(req)
	if err != nil {
		return nil, false, err
	}
	return e.cachedReplay(req, fp)
}

// RequestPath is a flow's path pattern with its "{id}" parameter set to
// id, as the request is stored and fingerprinted: "/rides/{id}/refund"
// becomes "/rides/42/refund".
func RequestPath(pattern string, id int64) string {
	return strings.Replace(pattern, "{id}", strconv.FormatInt(id, 10), 1)
}

// jsonAppender is params that write their own JSON, byte for byte what
// encoding/json writes of them (a request's stored form must not change
// with the path that made it), without its reflection.
type jsonAppender interface {
	AppendJSON(b []byte) []byte
}

// Form returns what is stored of req (its params as JSON) and its
// fingerprint, which a later request under the same key must match.
// Requests whose method, path and params are equal get the same form.
func Form(req Request) (params, fingerprint []byte, err error) {
	return requestForm(req)
}

func requestForm(req Request) (params, fp []byte, err error) {
	if a, ok := req.Params.(jsonAppender); ok {
		params = a.AppendJSON(make([]byte, 0, 128))
	} else if params, err = json.Marshal(req.Params); err != nil {
		return nil, nil, fmt.Errorf("marshal params: %w", err)
	}
	return params, fingerprint(req.Method, req.Path, params), nil
}

// fingerprint identifies a request: its method, path and normalised body.
func fingerprint(method, path string, params []byte) []byte {
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write(params)
	return h.Sum(nil)
}

// serve is Run with the request's stored form and fingerprint already made.
func serve[S any](ctx context.Context, e *Engine, flow *Flow[S], req Request, params, fp []byte) (*Response, error) {
	// The work goes on when the client goes away: it is bounded by the lease,
	// not by the client's patience.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.lease)
	defer cancel()

	if resp, ok, err := e.cachedReplay(req, fp); ok {
		return resp, err
	}
	key, state, resp, err := claim(ctx, e, flow, req, params, fp)
	if err == nil && resp == nil {
		resp, err = drive(ctx, e, flow, key, state)
	}
	if err == nil {
		// Every response that gets here is stored on a finished key, and
		// committed.
		e.replays.Put(replayKey{req.UserID, req.Key}, finishedResponse{fingerprint: string(fp), status: resp.Status, body: resp.Body}, e.now())
	}
	return resp, err
}

// replayKey identifies a client's idempotency key.
type replayKey struct {
	userID int64
	key    string
}

// finishedResponse is what a finished key stores: its request's fingerprint
// and its response. It never changes once committed, so a process may keep
// it in memory.
type finishedResponse struct {
	fingerprint string
	status      int
	body        []byte
}

type replayCache = ttlcache.Cache[replayKey, finishedResponse]

func newReplayCache(ttl time.Duration) *replayCache {
	return ttlcache.New[replayKey, finishedResponse](ttl)
}

// cachedReplay judges a request on a key this engine saw finished lately:
// a replay, or a mismatch. ok is false when the key is not in memory.
func (e *Engine) cachedReplay(req Request, fp []byte) (resp *Response, ok bool, err error) {
	f, ok := e.replays.Get(replayKey{req.UserID, req.Key}, e.now())
	if !ok {
		return nil, false, nil
	}
	if f.fingerprint != string(fp) {
		return nil, true, ErrKeyReused
	}
	e.obs.Replayed()
	return &Response{Status: f.status, Body: f.body, Replayed: true}, true, nil
}

// judgeExisting decides a request on an existing key without claiming it:
// a replay, a mismatch, a live lease, or (nil, nil) when the key can be
// claimed. A lease is judged by the database's clock: now is read with the
// row, in the same statement.
func (e *Engine) judgeExisting(row *dbgen.IdempotencyKey, now time.Time, fp []byte) (*Response, error) {
	if string(row.RequestFingerprint) != string(fp) {
		return nil, ErrKeyReused
	}
	if RecoveryPoint(row.RecoveryPoint) == Finished {
		e.obs.Replayed()
		return &Response{Status: int(*row.ResponseCode), Body: row.ResponseBody, Replayed: true}, nil
	}
	if row.LockedAt != nil {
		if left := row.LockedAt.Add(e.lease).Sub(now); left > 0 {
			e.obs.Conflicted()
			return nil, &KeyInUseError{RetryAfter: min(left, time.Second)}
		}
	}
	return nil, nil
}

// claim takes the key's lease (inserting the key if it is new) and, when the
// step from its recovery point makes no foreign call, runs that step's phase
// in the same transaction.
//
// The key is read first, alone: one statement, no transaction, no lock. A
// finished key's answer never changes once committed, so that read answers
// a replay or a mismatch in one round trip, and a live lease's conflict too.
// A key the read did not find is inserted with its lease; one that another
// request inserted meanwhile makes the insert find nothing, and is read
// again as last committed with the COMMIT that ends the insert's
// transaction. A key that can be claimed is locked, judged again and leased
// in a transaction of its own, which runs the phase.
func claim[S any](ctx context.Context, e *Engine, flow *Flow[S], req Request, params, fp []byte) (*Key, *S, *Response, error) {
	var (
		key       *Key
		state     *S
		resp      *Response
		outcome   Outcome
		claimable bool
	)
	token := uuid.New()
	start, phased := time.Now(), PhaseClaim
	ctx, span := e.startPhase(ctx, flow.Name, phased, true)
	// proceed runs, in the claiming transaction, what follows the lease:
	// the flow's state, and the phase when the step makes no call.
	proceed := func(ctx context.Context, tx pgx.Tx, row *dbgen.IdempotencyKey) error {
		key = keyFromRow(row, token)
		var err error
		if state, err = flow.Load(ctx, tx, key); err != nil {
			return err
		}
		step, err := flow.step(key.Point)
		if err != nil {
			return err
		}
		if step.Call != nil {
			crashPoint(flow.Name, phased, beforeCommit)
			return nil
		}
		phased = key.Point
		if outcome, err = step.Phase(ctx, tx, key, state); err != nil {
			return err
		}
		// The record carries the commit (CommitWith): the phase's writes are
		// done and nothing is committed yet.
		crashPoint(flow.Name, phased, beforeCommit)
		resp, err = e.record(ctx, tx, key, outcome)
		return err
	}
	// The read that answers replays, mismatches and live leases.
	existing, err := e.queries.IdempotencyKeyGet(ctx, e.pool, req.UserID, req.Key)
	switch {
	case err == nil:
		if resp, err = e.judgeExisting(&existing.IdempotencyKey, existing.DbNow, fp); resp == nil && err == nil {
			claimable = true
		}
	case errors.Is(err, pgx.ErrNoRows):
		err = e.InTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			key, state, resp, outcome, claimable, phased = nil, nil, nil, Outcome{}, false, PhaseClaim
			row, err := e.queries.IdempotencyKeyInsert(ctx, tx, dbgen.IdempotencyKeyInsertParams{
				IdempotencyKey:     req.Key,
				LockToken:          token,
				Flow:               flow.Name,
				RequestMethod:      req.Method,
				RequestPath:        req.Path,
				RequestParams:      params,
				RequestFingerprint: fp,
				RequestIP:          req.IP,
				UserID:             req.UserID,
			})
			if errors.Is(err, pgx.ErrNoRows) {
				// Another request inserted the key since the read; the
				// insert waited for its claim to end. The key is judged as
				// last committed, by a read that ends the transaction.
				existing, err := e.queries.IdempotencyKeyGet(ctx, CommitWith(tx), req.UserID, req.Key)
				if err != nil {
					return err
				}
				if resp, err = e.judgeExisting(&existing.IdempotencyKey, existing.DbNow, fp); resp != nil || err != nil {
					return err
				}
				claimable = true
				return nil
			}
			if err != nil {
				return err
			}
			return proceed(ctx, tx, row)
		})
	}
	if err == nil && claimable {
		err = e.InTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			key, state, resp, outcome, phased = nil, nil, nil, Outcome{}, PhaseClaim
			// Lock the key and judge it again, now that no other claim can
			// interleave.
			locked, err := e.queries.IdempotencyKeyLockByUserKey(ctx, tx, req.UserID, req.Key)
			if err != nil {
				return err
			}
			if resp, err = e.judgeExisting(&locked.IdempotencyKey, locked.DbNow, fp); resp != nil || err != nil {
				return err
			}
			row, err := e.queries.IdempotencyKeyLease(ctx, tx, token, locked.IdempotencyKey.ID)
			if err != nil {
				return err
			}
			return proceed(ctx, tx, row)
		})
	}
	endPhase(span, flow.Name, phased, key, outcome, resp, err)
	if err == nil {
		e.obs.PhaseDone(flow.Name, phased, time.Since(start))
		crashPoint(flow.Name, phased, afterCommit)
	}
	if err != nil {
		// The claim was rolled back: nothing holds the lease.
		return nil, nil, nil, err
	}
	if resp != nil {
		return nil, nil, resp, nil
	}
	if outcome.kind == outcomeMoveTo {
		key.Point = outcome.point
	}
	return key, state, nil, nil
}

// drive runs the steps of a claimed key until the request finishes or a step
// fails. On failure the lease is released and the recovery point stays, so a
// retry continues from it.
func drive[S any](ctx context.Context, e *Engine, flow *Flow[S], key *Key, state *S) (resp *Response, err error) {
	defer func() {
		if err != nil {
			e.release(ctx, key)
		}
	}()
	for key.Point != Finished {
		step, err := flow.step(key.Point)
		if err != nil {
			return nil, err
		}
		if step.Call != nil {
			if err := step.Call(ctx, key, state); err != nil {
				return nil, err
			}
			crashPoint(flow.Name, key.Point, afterCall)
		}
		var outcome Outcome
		start := time.Now()
		phaseCtx, span := e.startPhase(ctx, flow.Name, key.Point, false)
		err = e.InTx(phaseCtx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			resp = nil
			// The fence travels with the phase's first statement, and is
			// read before its answer.
			if _, err := e.queries.IdempotencyKeyFence(ctx, guarded(tx, ErrLeaseLost), key.ID, key.token); err != nil {
				return err
			}
			if outcome, err = step.Phase(ctx, tx, key, state); err != nil {
				return err
			}
			crashPoint(flow.Name, key.Point, beforeCommit)
			if resp, err = e.record(ctx, tx, key, outcome); err != nil {
				return err
			}
			return nil
		})
		endPhase(span, flow.Name, key.Point, key, outcome, resp, err)
		if err != nil {
			return nil, err
		}
		e.obs.PhaseDone(flow.Name, key.Point, time.Since(start))
		crashPoint(flow.Name, key.Point, afterCommit)
		switch outcome.kind {
		case outcomeMoveTo:
			key.Point = outcome.point
		case outcomeFinish:
			return resp, nil
		case outcomeNoOp:
			return nil, fmt.Errorf("flow %s: step from %q recorded nothing after its call", flow.Name, key.Point)
		}
	}
	return nil, fmt.Errorf("flow %s: key %d finished without a response", flow.Name, key.ID)
}

// record writes a phase's outcome onto the key, under the key's lease, as
// the last statement of the phase's transaction: the statement and the
// COMMIT travel together (CommitWith), so the phase costs no round trip for
// its commit. The key's row is locked from the claim's insert or lock, or
// the drive's fence, to the commit, so the update always finds the key under
// this request's token; an update that did not would report the lease lost.
func (e *Engine) record(ctx context.Context, tx pgx.Tx, key *Key, o Outcome) (*Response, error) {
	switch o.kind {
	case outcomeMoveTo:
		n, err := e.queries.IdempotencyKeySetRecoveryPoint(ctx, CommitWith(tx), dbgen.IdempotencyKeySetRecoveryPointParams{
			RecoveryPoint: string(o.point), ID: key.ID, LockToken: key.token,
		})
		if err == nil && n != 1 {
			err = ErrLeaseLost
		}
		return nil, err
	case outcomeFinish:
		body, err := json.Marshal(o.body)
		if err != nil {
			return nil, fmt.Errorf("marshal response: %w", err)
		}
		code := int32(o.status)
		n, err := e.queries.IdempotencyKeyFinish(ctx, CommitWith(tx), dbgen.IdempotencyKeyFinishParams{
			ResponseCode: &code, ResponseBody: body, ID: key.ID, LockToken: key.token,
		})
		if err == nil && n != 1 {
			err = ErrLeaseLost
		}
		if err != nil {
			return nil, err
		}
		return &Response{Status: o.status, Body: body}, nil
	}
	return nil, nil
}

// release gives the lease up so that a retry need not wait for it to expire.
// It runs on a fresh context: it must happen even when the request's own
// context is done, and even when the failed transaction's commit failed.
// What failed the request often fails the first try too (a connection
// broken by a restart or a failover of the database); the pool drops a
// broken connection, so it tries again, with backoff, within
// rollbackTimeout: a database back within that time (a promoted standby)
// frees the key at once instead of after the lease.
func (e *Engine) release(ctx context.Context, key *Key) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		_, err := e.queries.IdempotencyKeyRelease(ctx, e.pool, key.ID, key.token)
		if err == nil {
			return
		}
		if retry.Sleep(ctx, retry.Backoff(attempt, 25*time.Millisecond, 500*time.Millisecond)) != nil {
			e.logger.ErrorContext(ctx, "release idempotency key", "key_id", key.ID, "attempts", attempt+1, "err", err)
			return
		}
	}
}

func keyFromRow(row *dbgen.IdempotencyKey, token uuid.UUID) *Key {
	claimedAt := row.CreatedAt
	if row.LockedAt != nil {
		claimedAt = *row.LockedAt
	}
	return &Key{
		ID:        row.ID,
		UserID:    row.UserID,
		ClientKey: row.IdempotencyKey,
		CreatedAt: row.CreatedAt,
		ClaimedAt: claimedAt,
		Point:     RecoveryPoint(row.RecoveryPoint),
		Params:    row.RequestParams,
		IP:        row.RequestIP,
		token:     token,
	}
}
