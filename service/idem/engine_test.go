package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/service/idem"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// pointReady is the test flow's recovery point between its claim and its
// call.
const pointReady idem.RecoveryPoint = "ready"

// faults are what the test flow does wrong, each a number of times.
type faults struct {
	claimPhase   atomic.Int32 // the claim's phase fails (rolled back)
	callBefore   atomic.Int32 // the call fails before the issuer acts
	callAfter    atomic.Int32 // the issuer acts, its answer is lost
	phaseAfter   atomic.Int32 // the phase after the call fails (rolled back)
	serializable atomic.Int32 // the phase after the call meets a serialization failure
	// block, when set, holds the next call until it is closed, after
	// closing entered.
	block   chan struct{}
	entered chan struct{}
}

func take(n *atomic.Int32) bool {
	for {
		v := n.Load()
		if v <= 0 {
			return false
		}
		if n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

type giftParams struct {
	Cents int64 `json:"cents"`
}

type giftState struct {
	params giftParams
	card   string
}

var errInjected = errors.New("injected fault")

// giftFlow is started ──[claim phase]──► ready ──issue──[phase]──► finished.
func giftFlow(cards *issuer, f *faults) *idem.Flow[giftState] {
	return &idem.Flow[giftState]{
		Name: "gift.send", Method: http.MethodPost, Path: "/gifts",
		Load: func(ctx context.Context, tx pgx.Tx, key *idem.Key) (*giftState, error) {
			st := &giftState{}
			return st, json.Unmarshal(key.Params, &st.params)
		},
		Steps: map[idem.RecoveryPoint]idem.Step[giftState]{
			idem.Started: {Phase: func(ctx context.Context, tx pgx.Tx, key *idem.Key, st *giftState) (idem.Outcome, error) {
				if take(&f.claimPhase) {
					return idem.Outcome{}, errInjected
				}
				return idem.MoveTo(pointReady), nil
			}},
			pointReady: {
				Call: func(ctx context.Context, key *idem.Key, st *giftState) error {
					if block := f.block; block != nil {
						f.block = nil
						close(f.entered)
						<-block
					}
					if take(&f.callBefore) {
						return errInjected
					}
					st.card = cards.Issue(fmt.Sprintf("gift-%d-%s", key.UserID, key.ClientKey), st.params.Cents)
					if take(&f.callAfter) {
						return errInjected
					}
					return nil
				},
				Phase: func(ctx context.Context, tx pgx.Tx, key *idem.Key, st *giftState) (idem.Outcome, error) {
					if take(&f.serializable) {
						if _, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = 'serialization_failure'; END $$`); err != nil {
							return idem.Outcome{}, err
						}
					}
					if take(&f.phaseAfter) {
						return idem.Outcome{}, errInjected
					}
					// The card is recorded on its owner's row: a write of
					// the flow's own, which commits with the key's record
					// or not at all.
					if _, err := tx.Exec(ctx, `UPDATE users SET payment_source = payment_source || ',' || $2 WHERE id = $1`, key.UserID, st.card); err != nil {
						return idem.Outcome{}, err
					}
					return idem.Finish(http.StatusCreated, map[string]string{"card": st.card}), nil
				},
			},
		},
	}
}

// counts is an Observer that counts.
type counts struct {
	replayed, conflicted, phases, txRetried atomic.Int64
}

func (c *counts) Replayed()                                           { c.replayed.Add(1) }
func (c *counts) Conflicted()                                         { c.conflicted.Add(1) }
func (c *counts) PhaseDone(string, idem.RecoveryPoint, time.Duration) { c.phases.Add(1) }
func (c *counts) TxRetried()                                          { c.txRetried.Add(1) }

type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	engine *idem.Engine
	counts *counts
	cards  *issuer
	faults *faults
	flow   *idem.Flow[giftState]
	req    idem.Request
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{ctx: context.Background(), pool: dbtest.New(t), counts: &counts{}, cards: newIssuer(), faults: &faults{}}
	b.engine = b.newEngine(t)
	b.flow = giftFlow(b.cards, b.faults)
	idem.Register(b.engine, b.flow)
	owner, err := newOwner(b.ctx, b.pool, "owner@example.com")
	require.NoError(t, err)
	b.req = idem.Request{UserID: owner, Key: "gift-key-1", Method: http.MethodPost, Path: "/gifts", Params: giftParams{Cents: 2500}}
	return b
}

// newEngine is another process on the bundle's database: nothing in
// memory.
func (b *bundle) newEngine(t *testing.T) *idem.Engine {
	t.Helper()
	e, err := idem.New(idem.Config{Pool: b.pool, Observer: b.counts})
	require.NoError(t, err)
	return e
}

func (b *bundle) run(e *idem.Engine) (*idem.Response, error) {
	return idem.Run(b.ctx, e, b.flow, b.req)
}

// key reads the key's recovery point and whether it is leased.
func (b *bundle) key(t *testing.T) (id int64, point idem.RecoveryPoint, leased bool) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT id, recovery_point, locked_at IS NOT NULL FROM idempotency_keys
		WHERE user_id = $1 AND idempotency_key = $2`, b.req.UserID, b.req.Key).Scan(&id, &point, &leased))
	return id, point, leased
}

const wantBody = `{"card":"card_1_2500"}`

func TestRunReplays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, err := b.run(b.engine)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, first.Status)
	require.JSONEq(t, wantBody, string(first.Body))
	require.False(t, first.Replayed)

	fromMemory, err := b.run(b.engine)
	require.NoError(t, err)
	require.True(t, fromMemory.Replayed)
	require.Equal(t, first.Body, fromMemory.Body, "byte for byte")

	other := b.newEngine(t)
	fromDB, err := b.run(other)
	require.NoError(t, err)
	require.True(t, fromDB.Replayed)
	require.Equal(t, first.Body, fromDB.Body, "byte for byte")
	require.EqualValues(t, 2, b.counts.replayed.Load())

	b.req.Params = giftParams{Cents: 1}
	for _, e := range []*idem.Engine{b.engine, b.newEngine(t)} {
		_, err = b.run(e)
		require.ErrorIs(t, err, idem.ErrKeyReused)
	}
	require.Equal(t, 1, b.cards.Issued())
}

// TestConcurrentClaims: while one request holds the key in its call, every
// other request under the key is refused with KeyInUseError, at once; the
// card is issued once.
func TestConcurrentClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hold := make(chan struct{})
	b.faults.block, b.faults.entered = hold, make(chan struct{})
	entered := b.faults.entered

	first := make(chan error, 1)
	go func() { _, err := b.run(b.engine); first <- err }()
	<-entered

	const others = 12
	var wg sync.WaitGroup
	errs := make(chan error, others)
	for range others {
		wg.Go(func() { _, err := b.run(b.newEngine(t)); errs <- err })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		var inUse *idem.KeyInUseError
		require.ErrorAs(t, err, &inUse)
		require.Positive(t, inUse.RetryAfter)
		require.LessOrEqual(t, inUse.RetryAfter, time.Second)
	}
	require.EqualValues(t, others, b.counts.conflicted.Load())

	close(hold)
	require.NoError(t, <-first)
	require.Equal(t, 1, b.cards.Issued())
	_, point, leased := b.key(t)
	require.Equal(t, idem.Finished, point)
	require.False(t, leased)
}

// TestLeaseTakeoverFencesTheFirst: a request that works past its lease
// loses the key to the next request, which finishes it; the first, back
// from its call, writes nothing (ErrLeaseLost), not even the phase's own
// write that travelled with the fence. The foreign service saw
// one key: one card.
func TestLeaseTakeoverFencesTheFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hold := make(chan struct{})
	b.faults.block, b.faults.entered = hold, make(chan struct{})
	entered := b.faults.entered

	first := make(chan error, 1)
	go func() { _, err := b.run(b.engine); first <- err }()
	<-entered
	// The first request's lease runs out (by the database's clock).
	_, err := b.pool.Exec(b.ctx, `UPDATE idempotency_keys SET locked_at = locked_at - make_interval(secs => $1)`,
		(2 * b.engine.Lease()).Seconds())
	require.NoError(t, err)

	second, err := b.run(b.newEngine(t))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, second.Status)

	close(hold)
	require.ErrorIs(t, <-first, idem.ErrLeaseLost)
	require.Equal(t, 1, b.cards.Issued())
	var recorded string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT payment_source FROM users WHERE id = $1`, b.req.UserID).Scan(&recorded))
	require.Equal(t, "none,card_1_2500", recorded, "the fenced phase's own write is rolled back with it")
	replay, err := b.run(b.newEngine(t))
	require.NoError(t, err)
	require.Equal(t, second.Body, replay.Body, "the stored answer is the second's, never rewritten")
}

// TestCrashAtEveryBoundary: a request that fails at any boundary of a
// step leaves its key at the last committed recovery point, released; its
// client's retry, or the completer, finishes it with one card.
func TestCrashAtEveryBoundary(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		arm  func(f *faults)
		// point is where the key stays; "" when the claim left none.
		point idem.RecoveryPoint
	}{
		{"ClaimPhaseRolledBack", func(f *faults) { f.claimPhase.Store(1) }, ""},
		{"CallFailedBeforeActing", func(f *faults) { f.callBefore.Store(1) }, pointReady},
		{"CallAnswerLost", func(f *faults) { f.callAfter.Store(1) }, pointReady},
		{"PhaseRolledBackAfterCall", func(f *faults) { f.phaseAfter.Store(1) }, pointReady},
	} {
		for _, by := range []string{"Retry", "Completer"} {
			t.Run(c.name+"/"+by, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				c.arm(b.faults)
				_, err := b.run(b.engine)
				require.ErrorIs(t, err, errInjected)
				if c.point == "" {
					var n int
					require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&n))
					require.Zero(t, n, "nothing committed")
				} else {
					id, point, leased := b.key(t)
					require.Equal(t, c.point, point)
					require.False(t, leased, "released for the retry")
					if by == "Completer" {
						resp, err := b.newEngine(t).Complete(b.ctx, id)
						require.Error(t, err, "an engine that knows no flow cannot drive it")
						require.Nil(t, resp)
						resp, err = b.engine.Complete(b.ctx, id)
						require.NoError(t, err)
						require.JSONEq(t, wantBody, string(resp.Body))
					}
				}
				resp, err := b.run(b.newEngine(t))
				require.NoError(t, err)
				require.Equal(t, http.StatusCreated, resp.Status)
				require.JSONEq(t, wantBody, string(resp.Body))
				require.Equal(t, 1, b.cards.Issued())
			})
		}
	}

	t.Run("AnswerLostAfterCommit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first, err := b.run(b.engine)
		require.NoError(t, err)
		again, err := b.run(b.newEngine(t))
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, first.Body, again.Body)
		id, _, _ := b.key(t)
		done, err := b.engine.Complete(b.ctx, id)
		require.NoError(t, err)
		require.True(t, done.Replayed)
		require.Equal(t, 1, b.cards.Issued())
	})
}

// TestSerializationFailureRerunsThePhase: a phase that meets a
// serialization failure runs again from its start, in a new transaction.
func TestSerializationFailureRerunsThePhase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.faults.serializable.Store(2)
	resp, err := b.run(b.engine)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status)
	require.EqualValues(t, 2, b.counts.txRetried.Load())
	require.Equal(t, 1, b.cards.Issued())
}

// TestAbandonedAndReaped: the completer finds a key its client left,
// and the reaper deletes finished keys past retention, never unfinished
// ones.
func TestAbandonedAndReaped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.faults.callBefore.Store(1)
	_, err := b.run(b.engine)
	require.ErrorIs(t, err, errInjected)
	id, _, _ := b.key(t)

	var abandoned []int64
	require.NoError(t, b.engine.InTx(b.ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		abandoned, err = b.engine.Abandoned(ctx, tx, 0, 10)
		return err
	}))
	require.Equal(t, []int64{id}, abandoned)

	deleted, unfinished, err := b.engine.Reap(b.ctx, 0, 10, nil)
	require.NoError(t, err)
	require.Zero(t, deleted)
	require.EqualValues(t, 1, unfinished, "an unfinished key is never deleted")

	_, err = b.engine.Complete(b.ctx, id)
	require.NoError(t, err)
	deleted, unfinished, err = b.engine.Reap(b.ctx, 0, 10, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, deleted)
	require.Zero(t, unfinished)

	_, err = b.engine.Complete(b.ctx, id)
	require.ErrorIs(t, err, idem.ErrKeyNotFound)
}
