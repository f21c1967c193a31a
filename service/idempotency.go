package service

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/internal/failpoint"
)

// RecoveryPoint names the last atomic phase a request committed. Every key
// starts at RecoveryPointStarted and ends at RecoveryPointFinished; a flow
// names the points in between.
type RecoveryPoint string

const (
	// RecoveryPointStarted is the point of a newly claimed key.
	RecoveryPointStarted RecoveryPoint = "started"
	// RecoveryPointFinished is the point of a key with a stored response.
	RecoveryPointFinished RecoveryPoint = "finished"
)

// Outcome is what an atomic phase decides, recorded in the phase's own
// transaction: move to a recovery point, finish with a response, or nothing.
type Outcome struct {
	kind   outcomeKind
	point  RecoveryPoint
	status int
	body   any
}

type outcomeKind int

const (
	outcomeNoOp outcomeKind = iota
	outcomeMoveTo
	outcomeFinish
)

// MoveTo records that the phase reached recovery point p.
func MoveTo(p RecoveryPoint) Outcome { return Outcome{kind: outcomeMoveTo, point: p} }

// Finish finishes the request: status and body (marshalled to JSON) are
// stored on the key and replayed for every later request with it.
func Finish(status int, body any) Outcome {
	return Outcome{kind: outcomeFinish, status: status, body: body}
}

// NoOp records nothing; the request stays at its recovery point.
func NoOp() Outcome { return Outcome{} }

// Key is the state of a claimed idempotency key, as a flow sees it.
type Key struct {
	ID     int64
	UserID int64
	// ClientKey is the client's idempotency key.
	ClientKey string
	// CreatedAt is when the key was first claimed, by the database's clock.
	CreatedAt time.Time
	// ClaimedAt is when this claim took the lease, by the database's clock:
	// the present, as far as ages of the request's records go.
	ClaimedAt time.Time
	// Point is the recovery point the request resumes from.
	Point RecoveryPoint
	// Params is the normalised request input, as first received.
	Params json.RawMessage
	// IP is the client address of the first request, when known.
	IP *netip.Addr

	token uuid.UUID
}

// Step is how a request leaves one recovery point: an optional foreign call
// made with no transaction open, then an atomic phase that records its
// result. A Call that returns an error leaves the request where it was; a
// Call that gets a definitive failure records it in the state and returns nil
// so that its Phase can finish the request.
type Step[S any] struct {
	Call  func(ctx context.Context, key *Key, state *S) error
	Phase func(ctx context.Context, tx pgx.Tx, key *Key, state *S) (Outcome, error)
}

// Flow is a multi-phase request served under idempotency keys: a directed
// acyclic graph of steps from RecoveryPointStarted to RecoveryPointFinished.
type Flow[S any] struct {
	// Name identifies the flow on the key row, so that a stored request can
	// be driven on by something other than its client.
	Name string
	// Method and Path are the route of the flow's requests, Path as a
	// pattern with "{id}" for a path parameter: the HTTP adapter registers
	// the operation under the same constants, and every request of the flow
	// is stored and fingerprinted with them (requestPath).
	Method, Path string
	// Load rebuilds the flow's state from the key and the database. It runs
	// in the claim transaction, before any phase.
	Load  func(ctx context.Context, tx pgx.Tx, key *Key) (*S, error)
	Steps map[RecoveryPoint]Step[S]
}

// Request is one request made under an idempotency key.
type Request struct {
	UserID int64
	// Key is the client's idempotency key, already validated.
	Key    string
	Method string
	Path   string
	// Params is the normalised input; its JSON is stored and fingerprinted.
	Params any
	IP     *netip.Addr
}

// Response is the answer to a request made under an idempotency key.
type Response struct {
	Status int
	// Body is the JSON body, byte for byte as first stored.
	Body []byte
	// Replayed is true when the response comes from an earlier request.
	Replayed bool
}

// errLeaseLost means that another request took the key over while this one
// worked; this one stops without writing.
var errLeaseLost = errors.New("idempotency key lease lost")

func keyInUse(retryAfter time.Duration) *Error {
	return &Error{
		Code:       CodeKeyInUse,
		Message:    "another request with this idempotency key is in progress; retry later",
		RetryAfter: retryAfter,
	}
}

var errKeyReused = &Error{
	Code:    CodeKeyReused,
	Message: "this idempotency key was already used with a different request",
}

// run serves req with flow: replay, conflict, or claim and drive the request
// from its recovery point as far as it goes.
func run[S any](ctx context.Context, s *Service, flow *Flow[S], req Request) (*Response, error) {
	params, fp, err := requestForm(req)
	if err != nil {
		return nil, internal(err)
	}
	return serve(ctx, s, flow, req, params, fp)
}

// requestForm returns what is stored of req (its params as JSON) and its
// fingerprint. Requests whose params are equal get the same form.
func requestForm(req Request) (params, fp []byte, err error) {
	if a, ok := req.Params.(jsonAppender); ok {
		params = a.appendJSON(make([]byte, 0, 128))
	} else if params, err = json.Marshal(req.Params); err != nil {
		return nil, nil, fmt.Errorf("marshal params: %w", err)
	}
	return params, fingerprint(req.Method, req.Path, params), nil
}

// jsonAppender is params that write their own JSON, byte for byte what
// encoding/json writes of them (a request's stored form must not change
// with the path that made it), without its reflection.
type jsonAppender interface {
	appendJSON(b []byte) []byte
}

// appendJSONFloat appends f as encoding/json writes a float64: the shortest
// decimal that reads back as f, in exponent form below 1e-6 and from 1e21
// on, with the exponent's leading zero dropped (1e-07 is 1e-7). f must be
// finite.
func appendJSONFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// serve is run with the request's stored form and fingerprint already made.
func serve[S any](ctx context.Context, s *Service, flow *Flow[S], req Request, params, fp []byte) (*Response, error) {
	// The work goes on when the client goes away: it is bounded by the lease,
	// not by the client's patience.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.lease)
	defer cancel()

	if resp, ok, err := s.cachedReplay(req, fp); ok {
		return resp, err
	}
	key, state, resp, err := claim(ctx, s, flow, req, params, fp)
	if err == nil && resp == nil {
		resp, err = drive(ctx, s, flow, key, state)
	}
	if err == nil {
		// Every response that gets here is stored on a finished key, and
		// committed.
		s.replays.put(replayKey{req.UserID, req.Key}, finishedResponse{fingerprint: string(fp), status: resp.Status, body: resp.Body}, s.now())
	}
	return resp, err
}

// DefaultReplayCacheTTL is how long a process answers replays of a finished
// key from memory, unless Config.ReplayCacheTTL says otherwise.
const DefaultReplayCacheTTL = time.Minute

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

// cachedReplay judges a request on a key this process saw finished lately:
// a replay, or a mismatch. ok is false when the key is not in memory.
func (s *Service) cachedReplay(req Request, fp []byte) (resp *Response, ok bool, err error) {
	f, ok := s.replays.get(replayKey{req.UserID, req.Key}, s.now())
	if !ok {
		return nil, false, nil
	}
	if f.fingerprint != string(fp) {
		return nil, true, errKeyReused
	}
	s.metrics.replays.Add(1)
	return &Response{Status: f.status, Body: f.body, Replayed: true}, true, nil
}

// judgeExisting decides a request on an existing key without claiming it:
// a replay, a mismatch, a live lease, or (nil, nil) when the key can be
// claimed. A lease is judged by the database's clock: now is read with the
// row, in the same statement.
func (s *Service) judgeExisting(row *dbgen.IdempotencyKey, now time.Time, fp []byte) (*Response, error) {
	if string(row.RequestFingerprint) != string(fp) {
		return nil, errKeyReused
	}
	if RecoveryPoint(row.RecoveryPoint) == RecoveryPointFinished {
		s.metrics.replays.Add(1)
		return &Response{Status: int(*row.ResponseCode), Body: row.ResponseBody, Replayed: true}, nil
	}
	if row.LockedAt != nil {
		if left := row.LockedAt.Add(s.lease).Sub(now); left > 0 {
			s.metrics.conflicts.Add(1)
			return nil, keyInUse(min(left, time.Second))
		}
	}
	return nil, nil
}

// claim takes the key's lease (inserting the key if it is new) and, when the
// step from its recovery point makes no foreign call, runs that step's phase
// in the same transaction. A new key costs no read before its insert; an
// existing one is read as last committed, with the COMMIT that ends the
// insert's transaction (a replay or a conflict writes nothing and takes two
// round trips), and when it can be claimed it is locked, judged again and
// leased in a transaction of its own, which runs the phase.
func claim[S any](ctx context.Context, s *Service, flow *Flow[S], req Request, params, fp []byte) (*Key, *S, *Response, error) {
	var (
		key       *Key
		state     *S
		resp      *Response
		outcome   Outcome
		claimable bool
	)
	token := uuid.New()
	start, phased := time.Now(), phaseClaim
	ctx, span := s.startPhase(ctx, flow.Name, phased, true)
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
			crashPoint(flow.Name, phased, atBeforeCommit)
			return nil
		}
		phased = key.Point
		if outcome, err = step.Phase(ctx, tx, key, state); err != nil {
			return err
		}
		// The record carries the commit (commitWith): the phase's writes are
		// done and nothing is committed yet.
		crashPoint(flow.Name, phased, atBeforeCommit)
		resp, err = s.record(ctx, tx, key, outcome)
		return err
	}
	err := s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		key, state, resp, outcome, claimable, phased = nil, nil, nil, Outcome{}, false, phaseClaim
		row, err := s.queries.IdempotencyKeyInsert(ctx, tx, dbgen.IdempotencyKeyInsertParams{
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
		if isNoRows(err) {
			// The key exists, committed: the insert waited for any claim of
			// it in progress. Replays, mismatches and live leases are
			// answered from this read, which ends the transaction.
			existing, err := s.queries.IdempotencyKeyGet(ctx, commitWith(tx), req.UserID, req.Key)
			if err != nil {
				return err
			}
			if resp, err = s.judgeExisting(&existing.IdempotencyKey, existing.DbNow, fp); resp != nil || err != nil {
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
	if err == nil && claimable {
		err = s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			key, state, resp, outcome, phased = nil, nil, nil, Outcome{}, phaseClaim
			// Lock the key and judge it again, now that no other claim can
			// interleave.
			locked, err := s.queries.IdempotencyKeyLockByUserKey(ctx, tx, req.UserID, req.Key)
			if err != nil {
				return err
			}
			if resp, err = s.judgeExisting(&locked.IdempotencyKey, locked.DbNow, fp); resp != nil || err != nil {
				return err
			}
			row, err := s.queries.IdempotencyKeyLease(ctx, tx, token, locked.IdempotencyKey.ID)
			if err != nil {
				return err
			}
			return proceed(ctx, tx, row)
		})
	}
	endPhase(span, flow.Name, phased, key, outcome, resp, err)
	if err == nil {
		s.metrics.phase(flow.Name, phased, time.Since(start))
		crashPoint(flow.Name, phased, atAfterCommit)
	}
	if err != nil {
		// The claim was rolled back: nothing holds the lease.
		var e *Error
		if errors.As(err, &e) {
			return nil, nil, nil, err
		}
		return nil, nil, nil, internal(err)
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
func drive[S any](ctx context.Context, s *Service, flow *Flow[S], key *Key, state *S) (resp *Response, err error) {
	defer func() {
		if err != nil {
			s.release(ctx, key)
			err = classify(err)
		}
	}()
	for key.Point != RecoveryPointFinished {
		step, err := flow.step(key.Point)
		if err != nil {
			return nil, err
		}
		if step.Call != nil {
			if err := step.Call(ctx, key, state); err != nil {
				return nil, err
			}
			crashPoint(flow.Name, key.Point, atAfterCall)
		}
		var outcome Outcome
		start := time.Now()
		phaseCtx, span := s.startPhase(ctx, flow.Name, key.Point, false)
		err = s.inTx(phaseCtx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			resp = nil
			if _, err := s.queries.IdempotencyKeyFence(ctx, tx, key.ID, key.token); err != nil {
				if isNoRows(err) {
					return errLeaseLost
				}
				return err
			}
			if outcome, err = step.Phase(ctx, tx, key, state); err != nil {
				return err
			}
			crashPoint(flow.Name, key.Point, atBeforeCommit)
			if resp, err = s.record(ctx, tx, key, outcome); err != nil {
				return err
			}
			return nil
		})
		endPhase(span, flow.Name, key.Point, key, outcome, resp, err)
		if err != nil {
			return nil, err
		}
		s.metrics.phase(flow.Name, key.Point, time.Since(start))
		crashPoint(flow.Name, key.Point, atAfterCommit)
		switch outcome.kind {
		case outcomeMoveTo:
			key.Point = outcome.point
		case outcomeFinish:
			return resp, nil
		case outcomeNoOp:
			return nil, internal(fmt.Errorf("flow %s: step from %q recorded nothing after its call", flow.Name, key.Point))
		}
	}
	return nil, internal(fmt.Errorf("flow %s: key %d finished without a response", flow.Name, key.ID))
}

// record writes a phase's outcome onto the key, under the key's lease, as
// the last statement of the phase's transaction: the statement and the
// COMMIT travel together (commitWith), so the phase costs no round trip for
// its commit. The key's row is locked from the claim's insert or lock, or
// the drive's fence, to the commit, so the update always finds the key under
// this request's token; an update that did not would report the lease lost.
func (s *Service) record(ctx context.Context, tx pgx.Tx, key *Key, o Outcome) (*Response, error) {
	switch o.kind {
	case outcomeMoveTo:
		n, err := s.queries.IdempotencyKeySetRecoveryPoint(ctx, commitWith(tx), dbgen.IdempotencyKeySetRecoveryPointParams{
			RecoveryPoint: string(o.point), ID: key.ID, LockToken: key.token,
		})
		if err == nil && n != 1 {
			err = errLeaseLost
		}
		return nil, err
	case outcomeFinish:
		body, err := json.Marshal(o.body)
		if err != nil {
			return nil, fmt.Errorf("marshal response: %w", err)
		}
		code := int32(o.status)
		n, err := s.queries.IdempotencyKeyFinish(ctx, commitWith(tx), dbgen.IdempotencyKeyFinishParams{
			ResponseCode: &code, ResponseBody: body, ID: key.ID, LockToken: key.token,
		})
		if err == nil && n != 1 {
			err = errLeaseLost
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
func (s *Service) release(ctx context.Context, key *Key) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		_, err := s.queries.IdempotencyKeyRelease(ctx, s.pool, key.ID, key.token)
		if err == nil {
			return
		}
		if sleepCtx(ctx, backoff(attempt, 25*time.Millisecond, 500*time.Millisecond)) != nil {
			s.logger.ErrorContext(ctx, "release idempotency key", "key_id", key.ID, "attempts", attempt+1, "err", err)
			return
		}
	}
}

// classify turns a failure of a claimed request into the domain error the
// client sees. Nothing here is final: the request can be retried.
func classify(err error) error {
	var pe *PaymentError
	switch {
	case errors.Is(err, errLeaseLost):
		return keyInUse(time.Second)
	case errors.As(err, &pe):
		return &Error{
			Code:       CodeProcessorUnavailable,
			Message:    "the payment processor is unavailable; retry with the same idempotency key",
			RetryAfter: 2 * time.Second,
			Err:        err,
		}
	}
	return internal(err)
}

// Where a build with the "failpoints" tag can crash a request on purpose:
// the failpoint "<flow>:<from>:<at>" names the step from recovery point
// <from> ("claim" for a claim that runs no phase) of the flow.
const (
	// atBeforeCommit: the phase's writes are done, its commit is not.
	atBeforeCommit = "before_commit"
	// atAfterCommit: the phase is committed; nothing after it ran.
	atAfterCommit = "after_commit"
	// atAfterCall: the foreign call answered; nothing recorded its answer.
	atAfterCall = "after_call"
)

// crashPoint is a failpoint of the engine. Without the "failpoints" build
// tag it is empty and compiled away, name and all.
func crashPoint(flow string, from RecoveryPoint, at string) {
	if failpoint.Enabled {
		failpoint.Hit(flow + ":" + string(from) + ":" + at)
	}
}

func (f *Flow[S]) step(p RecoveryPoint) (Step[S], error) {
	step, ok := f.Steps[p]
	if !ok {
		return Step[S]{}, fmt.Errorf("flow %s: no step from recovery point %q", f.Name, p)
	}
	return step, nil
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

// requestPath is a flow's path pattern with its "{id}" parameter set to
// id, as the request is stored and fingerprinted: "/rides/{id}/refund"
// becomes "/rides/42/refund".
func requestPath(pattern string, id int64) string {
	return strings.Replace(pattern, "{id}", strconv.FormatInt(id, 10), 1)
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

// flowRunner drives a stored request of one flow from its key, for callers
// that find requests in the database rather than receive them.
type flowRunner func(ctx context.Context, s *Service, row *dbgen.IdempotencyKey) (*Response, error)

func (f *Flow[S]) runner() flowRunner {
	return func(ctx context.Context, s *Service, row *dbgen.IdempotencyKey) (*Response, error) {
		req := Request{
			UserID: row.UserID,
			Key:    row.IdempotencyKey,
			Method: row.RequestMethod,
			Path:   row.RequestPath,
			IP:     row.RequestIP,
		}
		return serve(ctx, s, f, req, row.RequestParams, row.RequestFingerprint)
	}
}
