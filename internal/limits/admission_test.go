package limits

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is the admission control's clock in these tests: time moves
// only when a test advances it.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// setup returns an admission control with a fixed limit (0: learnt within
// [4, 64]) on a fake clock, and its randomness returning the lowest draw.
func setup(t *testing.T, fixed int) (*Admission, *fakeClock) {
	t.Helper()
	clock := &fakeClock{t: time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)}
	a := NewAdmission(AdmissionConfig{Fixed: fixed, Min: 4, Max: 64, Now: clock.now, Rand: func(int) int { return 0 }})
	return a, clock
}

// admitNow decides a request at the fake clock's time, holding the lock
// as Admit does.
func admitNow(a *Admission, c Class) (*Ticket, *waiter, *Refusal) {
	return admitBy(a, c, time.Time{})
}

// admitBy is admitNow for a request whose context ends at deadline.
func admitBy(a *Admission, c Class, deadline time.Time) (*Ticket, *waiter, *Refusal) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.admit(c, a.now(), deadline)
}

// hold admits n requests of class c at once and returns their tickets.
func hold(t *testing.T, a *Admission, c Class, n int) []*Ticket {
	t.Helper()
	held := make([]*Ticket, 0, n)
	for range n {
		tk, w, _ := admitNow(a, c)
		require.NotNil(t, tk, "admitted at once")
		require.Nil(t, w)
		held = append(held, tk)
	}
	return held
}

// decided returns what a waiter was told, or false when it still waits.
func decided(w *waiter) (*Ticket, bool) {
	select {
	case t := <-w.ch:
		return t, true
	default:
		return nil, false
	}
}

func TestClassesKeepTheirShares(t *testing.T) {
	t.Parallel()
	a, _ := setup(t, 10)

	var bookings []*Ticket
	for range 8 {
		tk, w, r := admitNow(a, Booking)
		require.NotNil(t, tk, "bookings fill four fifths of the limit")
		require.Nil(t, w)
		require.Nil(t, r)
		bookings = append(bookings, tk)
	}
	_, w, _ := admitNow(a, Booking)
	require.NotNil(t, w, "the ninth booking waits: the last fifth is priority work's")
	_, wl, _ := admitNow(a, List)
	require.NotNil(t, wl, "lists stop at half the limit")
	for range 2 {
		tk, _, _ := admitNow(a, Priority)
		require.NotNil(t, tk, "priority work takes the share kept for it")
	}
	_, wp, _ := admitNow(a, Priority)
	require.NotNil(t, wp, "the limit is full")

	// A slot freed goes to the highest class waiting.
	bookings[0].Done("POST /rides", Served)
	tk, ok := decided(wp)
	require.True(t, ok)
	require.NotNil(t, tk)
	_, ok = decided(w)
	require.False(t, ok, "the booking still waits: no booking room")
	require.Equal(t, 10, a.Stats().InFlight[Priority]+a.Stats().InFlight[Booking])
}

func TestExemptIsNeverLimited(t *testing.T) {
	t.Parallel()
	a, _ := setup(t, 1)
	tk, _, _ := admitNow(a, Booking)
	require.NotNil(t, tk)
	var exempt []*Ticket
	for range 100 {
		e, r := a.Admit(context.Background(), Exempt)
		require.NotNil(t, e)
		require.Nil(t, r)
		exempt = append(exempt, e)
	}
	require.Equal(t, 100, a.Stats().InFlight[Exempt])
	require.Equal(t, 1, a.Stats().InFlight[Booking], "the exempt requests are not counted against the limit")
	for _, e := range exempt {
		e.Done("GET /healthz", Served)
	}
	require.Zero(t, a.Stats().InFlight[Exempt])
}

func TestQueueIsFIFOInABurst(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 4)
	held := hold(t, a, Booking, 3)
	_, w1, _ := admitNow(a, Booking)
	clock.advance(time.Millisecond)
	_, w2, _ := admitNow(a, Booking)
	require.NotNil(t, w1)
	require.NotNil(t, w2)
	clock.advance(time.Millisecond)
	held[0].Done("op", Answered)
	tk, ok := decided(w1)
	require.True(t, ok)
	require.NotNil(t, tk, "the oldest waiter goes first")
	_, ok = decided(w2)
	require.False(t, ok)
}

// turnover keeps a queue of bookings that never empties, for d or until a
// waiter is dropped: every step one more waits and the oldest held request
// ends after wait, handing its slot to the waiter queued a step before. It
// returns when the first waiter was dropped (zero if none) and how long it
// had waited.
func turnover(t *testing.T, a *Admission, clock *fakeClock, held []*Ticket, d, wait time.Duration) (dropped time.Time, waited time.Duration) {
	t.Helper()
	start := clock.now()
	_, pending, _ := admitNow(a, Booking)
	require.NotNil(t, pending)
	queuedAt := clock.now()
	for clock.now().Sub(start) < d {
		_, w, _ := admitNow(a, Booking)
		require.NotNil(t, w)
		at := clock.now()
		clock.advance(wait)
		held[0].Done("op", Answered)
		tk, ok := decided(pending)
		require.True(t, ok)
		if tk == nil {
			return clock.now(), clock.now().Sub(queuedAt)
		}
		held, pending, queuedAt = append(held[1:], tk), w, at
	}
	return time.Time{}, 0
}

func TestAStandingQueueDropsItsOldWaiters(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 4)
	start := clock.now()
	held := hold(t, a, Booking, 3)
	// Every waiter waits 20 ms (two steps of 10), and each one served is
	// replaced by a new one: after a whole interval of it the queue stands,
	// and a waiter is cut long before the wait a burst's waiter is given.
	dropped, waited := turnover(t, a, clock, held, 2*time.Second, 10*time.Millisecond)
	require.False(t, dropped.IsZero(), "a waiter was dropped")
	require.GreaterOrEqual(t, dropped.Sub(start), queueInterval)
	require.Less(t, dropped.Sub(start), 2*queueInterval+20*time.Millisecond)
	require.Less(t, waited, 2*queueInterval)
}

func TestAQueueIsJudgedAgainstTheServiceTime(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 4)
	// A slow machine: each request takes 100 ms to serve.
	for _, tk := range hold(t, a, Booking, 3) {
		clock.advance(100 * time.Millisecond)
		tk.Done("op", Served)
	}
	held := hold(t, a, Booking, 3)
	// Every waiter waits 60 ms (two steps of 30), far above 5 ms but under
	// the 100 ms a request takes: a few clients more than the limit on a
	// slow machine, not a standing queue.
	dropped, _ := turnover(t, a, clock, held, 2*time.Second, 30*time.Millisecond)
	require.True(t, dropped.IsZero(), "no waiter was dropped")
	require.False(t, a.stands)
}

func TestAShortQueueThatTurnsOverFastDoesNotStand(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 4)
	held := hold(t, a, Booking, 3)
	// Never empty for a second, but every waiter waits 4 ms (two steps of
	// 2), under 5: a closed loop of a few clients more than the limit's
	// share.
	dropped, _ := turnover(t, a, clock, held, time.Second, 2*time.Millisecond)
	require.True(t, dropped.IsZero(), "no waiter was dropped")
	require.False(t, a.stands)
}

// stand marks a's queue as standing for the interval that begins now.
func stand(a *Admission) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stands = true
	a.newInterval(a.now())
}

func TestAStandingQueueServesTheNewestFirst(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 4)
	held := hold(t, a, Booking, 3)
	_, wa, _ := admitNow(a, Booking)
	stand(a)
	clock.advance(time.Millisecond)
	_, wb, _ := admitNow(a, Booking)
	clock.advance(time.Millisecond)
	held[0].Done("op", Answered)
	tb, ok := decided(wb)
	require.True(t, ok)
	require.NotNil(t, tb, "LIFO: the newest waiter")
	_, ok = decided(wa)
	require.False(t, ok)
	clock.advance(queueTarget)
	held[1].Done("op", Answered) // expires wa before it hands the slot
	ta, ok := decided(wa)
	require.True(t, ok)
	require.Nil(t, ta, "wa waited past the standing timeout")
	require.False(t, a.stands, "an empty queue stands no more")
}

func TestABurstThatDrainsWithinItsWaitIsServedWhole(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 4)
	held := hold(t, a, Booking, 3)
	// 200 requests at once against a limit whose booking share is 3: the
	// queue drains three every 5 ms, in about 330 ms, longer than an
	// interval, and no request arrives meanwhile.
	var ws []*waiter
	for range 200 {
		_, w, r := admitNow(a, Booking)
		require.Nil(t, r, "a burst is queued, never refused by its length")
		require.NotNil(t, w)
		ws = append(ws, w)
	}
	served := 0
	for next := 0; next < len(ws); {
		clock.advance(5 * time.Millisecond)
		for i := range held {
			held[i].Done("op", Answered)
			tk, ok := decided(ws[next])
			require.True(t, ok, "waiter %d decided after %s", next, clock.now().Sub(ws[next].at))
			require.NotNil(t, tk, "waiter %d served after %s", next, clock.now().Sub(ws[next].at))
			held[i] = tk
			served++
			next++
			if next == len(ws) {
				break
			}
		}
		require.False(t, a.stands, "a draining queue does not stand (after %s)", clock.now().Sub(ws[0].at))
	}
	require.Equal(t, len(ws), served)
}

func TestAQueuedRequestPastItsDeadlineIsDroppedBeforeAnyWork(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 1)
	held, _, _ := admitNow(a, Booking)
	_, late, _ := admitBy(a, Booking, clock.now().Add(20*time.Millisecond))
	_, next, _ := admitNow(a, Booking)
	clock.advance(19 * time.Millisecond)
	a.mu.Lock()
	a.expire(a.now())
	a.mu.Unlock()
	_, ok := decided(late)
	require.False(t, ok, "within its deadline")
	clock.advance(time.Millisecond)
	held.Done("op", Answered) // expires late before it hands the slot
	tk, ok := decided(late)
	require.True(t, ok)
	require.Nil(t, tk, "past its deadline: refused, never handed the slot")
	require.Equal(t, RefusedQueueTimeout, late.reason)
	tk, ok = decided(next)
	require.True(t, ok)
	require.NotNil(t, tk, "the slot went to the next waiter")
}

func TestARequestWithoutADeadlineWaitsNoLongerThanDefaultQueueWait(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 1)
	held, _, _ := admitNow(a, Booking)
	_, w, _ := admitNow(a, Priority) // priority work is never cut short
	clock.advance(defaultQueueWait - time.Millisecond)
	a.mu.Lock()
	a.expire(a.now())
	a.mu.Unlock()
	_, ok := decided(w)
	require.False(t, ok, "within the wait")
	clock.advance(time.Millisecond)
	held.Done("op", Answered)
	tk, ok := decided(w)
	require.True(t, ok)
	require.Nil(t, tk)
}

func TestQueueIsBoundedAndARefusalSaysWhenToComeBack(t *testing.T) {
	t.Parallel()
	a, _ := setup(t, 8)
	for range 8 {
		tk, _, _ := admitNow(a, Priority)
		require.NotNil(t, tk)
	}
	var last *waiter
	for range maxQueued {
		_, w, _ := admitNow(a, Booking)
		require.NotNil(t, w)
		last = w
	}
	tk, w, r := admitNow(a, Booking)
	require.Nil(t, tk)
	require.Nil(t, w)
	require.Equal(t, RefusedFull, r.Reason)
	require.GreaterOrEqual(t, r.RetryAfter, 1)

	// Priority work is never refused while bookings wait: it takes the
	// newest booking's place.
	_, wp, r := admitNow(a, Priority)
	require.Nil(t, r)
	require.NotNil(t, wp)
	tk, ok := decided(last)
	require.True(t, ok)
	require.Nil(t, tk)
	require.Equal(t, RefusedFull, last.reason)
	require.Equal(t, maxQueued, a.Stats().Queued[Booking]+a.Stats().Queued[Priority])
}

func TestRetryAfterFollowsTheExcessAndSpreads(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	var e excess
	require.Equal(t, 1, e.base(clock.now(), 0), "nothing waits: one second")
	for range 10 {
		e.served(clock.now())
		clock.advance(50 * time.Millisecond)
	}
	for range 30 {
		e.refused(clock.now())
	}
	require.Equal(t, 3, e.base(clock.now(), 0), "30 refused against 10 served in the last second")
	require.Equal(t, 4, e.base(clock.now(), 10), "the queued wait too")
	clock.advance(2 * time.Second)
	require.Equal(t, 1, e.base(clock.now(), 0), "the second has passed")
	for range 1000 {
		e.refused(clock.now())
	}
	require.Equal(t, maxRetryAfter, e.base(clock.now(), 0), "bounded")

	// A service that served 700 a second is not judged by a pause.
	var busy excess
	for range 700 {
		busy.served(clock.now())
	}
	clock.advance(time.Second)
	for range 300 {
		busy.refused(clock.now())
	}
	require.Equal(t, 5, busy.base(clock.now(), 0), "300 waiting against a second's worth (70) of the last ten")

	require.Equal(t, 3, spread(3, func(int) int { return 0 }))
	require.Equal(t, 6, spread(3, func(n int) int { return n - 1 }), "up to twice the base")
}

// TestAdmitWaitsForASlot runs the blocking Admit with real goroutines: a
// queued request gets the slot its predecessor frees, and one whose client
// leaves is refused and leaves the queue.
func TestAdmitWaitsForASlot(t *testing.T) {
	t.Parallel()
	a := NewAdmission(AdmissionConfig{Fixed: 1})
	ctx := context.Background()
	first, r := a.Admit(ctx, Booking)
	require.Nil(t, r)

	got := make(chan *Ticket)
	go func() {
		tk, _ := a.Admit(ctx, Booking)
		got <- tk
	}()
	require.Eventually(t, func() bool { return a.Stats().Queued[Booking] == 1 }, 10*time.Second, time.Millisecond)
	first.Done("op", Served)
	second := <-got
	require.NotNil(t, second)

	cctx, cancel := context.WithCancel(ctx)
	refused := make(chan *Refusal)
	go func() {
		_, r := a.Admit(cctx, Booking)
		refused <- r
	}()
	require.Eventually(t, func() bool { return a.Stats().Queued[Booking] == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	r = <-refused
	require.NotNil(t, r)
	require.Equal(t, RefusedClientGone, r.Reason)
	require.Zero(t, a.Stats().Queued[Booking])

	// A request whose deadline passes while it waits gives up then.
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer dcancel()
	_, r = a.Admit(dctx, Booking)
	require.NotNil(t, r)
	require.Equal(t, RefusedQueueTimeout, r.Reason)
	require.Zero(t, a.Stats().Queued[Booking])
	second.Done("op", Served)
	require.Zero(t, a.Stats().InFlight[Booking])
}

func TestStartedRemembersKeysForItsTTL(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	s := NewStarted(time.Minute, 2)
	s.now = clock.now
	s.Add("a")
	started, finished := s.Seen("a")
	require.True(t, started)
	require.False(t, finished)
	s.Finish("a")
	started, finished = s.Seen("a")
	require.True(t, started)
	require.True(t, finished)
	started, _ = s.Seen("b")
	require.False(t, started)
	s.Add("b")
	s.Forget("b")
	started, _ = s.Seen("b")
	require.False(t, started, "forgotten")
	s.Add("b")
	s.Add("c")
	started, _ = s.Seen("c")
	require.False(t, started, "full")
	clock.advance(time.Minute)
	started, _ = s.Seen("a")
	require.False(t, started, "forgotten after its ttl")
	s.Add("c")
	started, _ = s.Seen("c")
	require.True(t, started, "expired keys make room")
}

func TestPriorityWorkKeepsTheLongTimeoutInAStandingQueue(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 5)
	held := hold(t, a, Priority, 5)
	_, wb, _ := admitNow(a, Booking)
	_, wp, _ := admitNow(a, Priority)
	stand(a)
	clock.advance(50 * time.Millisecond)
	held[0].Done("op", Answered)
	tb, ok := decided(wb)
	require.True(t, ok)
	require.Nil(t, tb, "the booking gave up after the standing timeout")
	tp, ok := decided(wp)
	require.True(t, ok)
	require.NotNil(t, tp, "the priority waiter outlived it and got the slot")
}

func TestBoundsComeFromThePoolAndTheMachine(t *testing.T) {
	t.Parallel()
	lo, hi := Bounds(4)
	require.Equal(t, max(2*runtime.GOMAXPROCS(0), 4), lo, "twice the CPUs")
	require.Equal(t, max(256, 16*lo), hi)
	_, hi = Bounds(50)
	require.Equal(t, max(3200, 16*lo), hi, "64 requests per pooled connection")
}

// TestARequestWaitsForTheDeadlineItsClientGave runs the blocking Admit: a
// request whose client waits 300 ms waits for a slot longer than one that
// gave no deadline, and gives up before its client does.
func TestARequestWaitsForTheDeadlineItsClientGave(t *testing.T) {
	t.Parallel()
	a := NewAdmission(AdmissionConfig{Fixed: 1})
	held, r := a.Admit(context.Background(), Booking)
	require.Nil(t, r)
	start := time.Now()
	_, r = a.Admit(WithWaitDeadline(context.Background(), start.Add(700*time.Millisecond)), Booking)
	require.NotNil(t, r)
	require.Equal(t, RefusedQueueTimeout, r.Reason)
	waited := time.Since(start)
	require.Greater(t, waited, defaultQueueWait, "longer than a request without a deadline")
	require.Less(t, waited, 700*time.Millisecond+queueInterval, "not past its client's deadline")
	held.Done("op", Served)
}

// servedIn makes d the mean time a's requests take to be served.
func servedIn(t *testing.T, a *Admission, clock *fakeClock, d time.Duration) {
	t.Helper()
	for range 3 {
		tk := hold(t, a, Booking, 1)[0]
		clock.advance(d)
		tk.Done("op", Served)
	}
}

func TestARequestThatWouldWaitPastItsDeadlineIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 4)
	// Requests take 100 ms to serve; a booking may fill three slots.
	servedIn(t, a, clock, 100*time.Millisecond)
	hold(t, a, Booking, 3)
	// A queue that lasted an interval, none of its waiters served yet.
	_, first, _ := admitNow(a, Booking)
	require.NotNil(t, first)
	clock.advance(queueInterval)
	deadline := clock.now().Add(time.Second)
	// The nth waiter would be served after n / 3 × 100 ms: the 30th at its
	// deadline, the 31st after it.
	for i := 1; i < 29; i++ {
		_, w, r := admitBy(a, Booking, deadline)
		require.Nil(t, r, "waiter %d fits its deadline", i+1)
		require.NotNil(t, w)
	}
	_, w, r := admitBy(a, Booking, deadline)
	require.NotNil(t, w, "the 30th is served at its deadline's edge")
	require.Nil(t, r)
	_, w, r = admitBy(a, Booking, deadline)
	require.Nil(t, w, "the 31st is never queued")
	require.NotNil(t, r)
	require.Equal(t, RefusedQueueTimeout, r.Reason)
	require.Equal(t, 30, a.Stats().Queued[Booking])

	// Priority work passes the bookings: its wait counts only its own.
	hold(t, a, Priority, 1)
	_, wp, rp := admitBy(a, Priority, deadline)
	require.Nil(t, rp)
	require.NotNil(t, wp)

	// A request whose client gives it longer waits behind them.
	_, wl, rl := admitBy(a, Booking, clock.now().Add(5*time.Second))
	require.Nil(t, rl)
	require.NotNil(t, wl)
}

func TestABurstIsQueuedWholeWhateverItsEstimatedWait(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 4)
	servedIn(t, a, clock, 100*time.Millisecond)
	hold(t, a, Booking, 3)
	// 60 requests at once, each waiting a second: at 100 ms a request on
	// three slots the last would wait two, but a young queue is a burst,
	// judged by how it drains, not by the estimate.
	deadline := clock.now().Add(time.Second)
	for i := range 60 {
		clock.advance(time.Millisecond)
		_, w, r := admitBy(a, Booking, deadline)
		require.Nil(t, r, "waiter %d is queued", i+1)
		require.NotNil(t, w)
	}
	require.Equal(t, 60, a.Stats().Queued[Booking])
}

func TestASlowServiceKeepsAWaiterForEverySlot(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 4)
	// Requests take two seconds to serve, longer than a waiter's second:
	// the first waiters would still wait past it, but a slot freed must
	// find one, or the service idles while it refuses.
	servedIn(t, a, clock, 2*time.Second)
	hold(t, a, Booking, 3)
	_, first, _ := admitNow(a, Booking)
	require.NotNil(t, first)
	clock.advance(queueInterval)
	deadline := clock.now().Add(time.Second)
	for i := 2; i <= 3; i++ {
		_, w, r := admitBy(a, Booking, deadline)
		require.Nil(t, r, "waiter %d: one for each of the three slots", i)
		require.NotNil(t, w)
	}
	_, w, r := admitBy(a, Booking, deadline)
	require.Nil(t, w, "a fourth would wait for a second round of the slots")
	require.NotNil(t, r)
	require.Equal(t, RefusedQueueTimeout, r.Reason)
}
