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
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.admit(c, a.now())
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
	for range 100 {
		e, w, r := admitNow(a, Exempt)
		require.NotNil(t, e)
		require.Nil(t, w)
		require.Nil(t, r)
	}
	require.Equal(t, 100, a.Stats().InFlight[Exempt])
	require.Equal(t, 1, a.Stats().InFlight[Booking], "the exempt requests are not counted against the limit")
}

func TestQueueIsFIFOUntilItStandsThenLIFOWithAShortTimeout(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 4)
	var held []*Ticket
	for range 3 {
		tk, _, _ := admitNow(a, Booking)
		held = append(held, tk)
	}
	_, w1, _ := admitNow(a, Booking)
	clock.advance(time.Millisecond)
	_, w2, _ := admitNow(a, Booking)
	require.NotNil(t, w1)
	require.NotNil(t, w2)

	// A burst: the oldest waiter goes first.
	clock.advance(time.Millisecond)
	held[0].Done("op", Answered)
	tk, ok := decided(w1)
	require.True(t, ok)
	require.NotNil(t, tk)
	_, ok = decided(w2)
	require.False(t, ok)

	// The queue has not been empty for standingAfter: it stands. The
	// newest waiter goes first, and a waiter gives up after 5 ms.
	_, w3, _ := admitNow(a, Booking)
	clock.advance(standingAfter)
	_, w4, _ := admitNow(a, Booking) // w2 and w3 are older than 5 ms: refused
	t2, ok := decided(w2)
	require.True(t, ok)
	require.Nil(t, t2, "timed out in a standing queue")
	t3, ok := decided(w3)
	require.True(t, ok)
	require.Nil(t, t3)
	// The expiry emptied the queue: it stands again once it has not been
	// empty for standingAfter.
	clock.advance(standingAfter - time.Millisecond)
	_, w5, _ := admitNow(a, Booking)
	clock.advance(time.Millisecond)
	_, w6, _ := admitNow(a, Booking) // w4 is now standingAfter old: refused
	t4, ok := decided(w4)
	require.True(t, ok)
	require.Nil(t, t4)
	clock.advance(time.Millisecond)
	held[1].Done("op", Answered)
	t6, ok := decided(w6)
	require.True(t, ok)
	require.NotNil(t, t6, "LIFO: the newest waiter")
	_, ok = decided(w5)
	require.False(t, ok)
	clock.advance(standingTimeout)
	held[2].Done("op", Answered)
	t5, ok := decided(w5)
	require.True(t, ok)
	require.Nil(t, t5, "w5 waited past the standing timeout")
}

func TestQueueTimesOutAfter100msWhenNotStanding(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 1)
	held, _, _ := admitNow(a, Booking)
	_, w, _ := admitNow(a, Booking)
	clock.advance(queueTimeout - time.Millisecond)
	a.mu.Lock()
	a.expire(a.now())
	a.mu.Unlock()
	_, ok := decided(w)
	require.False(t, ok, "within the timeout")
	clock.advance(time.Millisecond)
	held.Done("op", Answered) // expires w before it hands the slot
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
	for range minQueue {
		_, w, _ := admitNow(a, Booking)
		require.NotNil(t, w)
	}
	tk, w, r := admitNow(a, Booking)
	require.Nil(t, tk)
	require.Nil(t, w)
	require.Equal(t, RefusedFull, r.Reason)
	require.GreaterOrEqual(t, r.RetryAfter, 1)
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
	var held []*Ticket
	for range 5 {
		tk, _, _ := admitNow(a, Priority)
		held = append(held, tk)
	}
	_, wb, _ := admitNow(a, Booking)
	clock.advance(standingAfter - time.Millisecond)
	_, wp, _ := admitNow(a, Priority)
	clock.advance(time.Millisecond)
	_, wb2, _ := admitNow(a, Booking) // the queue stands: wb is refused
	tb, ok := decided(wb)
	require.True(t, ok)
	require.Nil(t, tb)
	clock.advance(50 * time.Millisecond)
	held[0].Done("op", Answered)
	tp, ok := decided(wp)
	require.True(t, ok)
	require.NotNil(t, tp, "the priority waiter outlived the standing timeout and got the slot")
	tb2, ok := decided(wb2)
	require.True(t, ok)
	require.Nil(t, tb2, "a booking as old did not")
}

func TestBoundsComeFromThePoolAndTheMachine(t *testing.T) {
	t.Parallel()
	lo, hi := Bounds(4)
	require.Equal(t, max(2*runtime.GOMAXPROCS(0), 4), lo, "twice the CPUs")
	require.Equal(t, max(256, 16*lo), hi)
	_, hi = Bounds(50)
	require.Equal(t, max(3200, 16*lo), hi, "64 requests per pooled connection")
}
