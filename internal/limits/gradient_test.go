package limits

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// round admits up to want requests of class c at once (the ones that
// would wait leave the queue at once), lets rtt pass, and ends the
// admitted ones as served; it returns how many were admitted.
func round(a *Admission, clock *fakeClock, c Class, want int, rtt time.Duration) int {
	var ts []*Ticket
	for range want {
		tk, w, _ := admitNow(a, c)
		if tk != nil {
			ts = append(ts, tk)
		} else if w != nil {
			a.mu.Lock()
			a.withdraw(w)
			a.mu.Unlock()
		}
	}
	clock.advance(rtt)
	for _, tk := range ts {
		tk.Done("POST /rides", Served)
	}
	return len(ts)
}

// rounds runs rounds for d of the fake clock.
func rounds(a *Admission, clock *fakeClock, d time.Duration, want int, rtt time.Duration) {
	for end := clock.now().Add(d); clock.now().Before(end); {
		round(a, clock, Booking, want, rtt)
	}
}

func current(a *Admission) int { return a.Stats().Limit }

// probed runs the first probe at a latency of rtt: the first answers give
// a provisional baseline and bring the probe a second later.
func probed(t *testing.T, a *Admission, clock *fakeClock, rtt time.Duration) {
	t.Helper()
	require.Equal(t, 16, current(a), "it starts at four times its minimum")
	for !a.grad.probing {
		round(a, clock, Booking, 4, rtt)
	}
	require.Equal(t, 4, current(a), "the probe holds the limit at its minimum")
	for a.grad.probing {
		require.Equal(t, 3, round(a, clock, Booking, 4, rtt), "bookings fill four fifths of the minimum")
	}
	require.Equal(t, rtt, a.grad.base["POST /rides"].rtt)
	require.Equal(t, 16, current(a), "the limit given back")
	// The lowest draw puts the next probe a sixth early.
	require.Equal(t, probeEvery-probeEvery/6, a.grad.nextProbe.Sub(clock.now()))
}

func TestLimitGrowsWhileTheLatencyHoldsAndFallsWhenItRises(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 0)
	probed(t, a, clock, 10*time.Millisecond)

	// More requests than the limit, answered as fast as the baseline: the
	// limit grows to its maximum.
	rounds(a, clock, 2*time.Second, 100, 10*time.Millisecond)
	require.Equal(t, 64, current(a))

	// The latency rises to four times the baseline: the limit falls to its
	// minimum.
	rounds(a, clock, 3*time.Second, 100, 40*time.Millisecond)
	require.Equal(t, 4, current(a))

	// Back at the baseline, it climbs again.
	rounds(a, clock, 2*time.Second, 100, 10*time.Millisecond)
	require.Greater(t, current(a), 32)
}

func TestLimitSettlesWhereTheLatencyMeetsItsTolerance(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 0)
	probed(t, a, clock, 10*time.Millisecond)
	// A server whose latency grows with what it holds past 12 requests
	// (a machine saturated at 12): the limit settles near the knee, not at
	// its maximum, with its latency within a few times the baseline.
	latency := func(n int) time.Duration { return 10 * time.Millisecond * time.Duration(max(n, 12)) / 12 }
	var seen []int
	for end := clock.now().Add(20 * time.Second); clock.now().Before(end); {
		n := round(a, clock, Booking, 200, latency(current(a)*4/5))
		seen = append(seen, n)
	}
	tail := seen[len(seen)-200:]
	lo, hi := tail[0], tail[0]
	for _, n := range tail {
		lo, hi = min(lo, n), max(hi, n)
	}
	t.Logf("admitted per round over the last 200 rounds: %d to %d", lo, hi)
	require.GreaterOrEqual(t, lo, 10, "it keeps the machine busy")
	require.LessOrEqual(t, hi, 40, "and holds no more than a few times its knee")
}

func TestLimitDoesNotGrowWithoutDemand(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 0)
	probed(t, a, clock, 10*time.Millisecond)
	// Two requests at a time never fill half the limit, and none waits.
	rounds(a, clock, 2*time.Second, 2, 10*time.Millisecond)
	require.Equal(t, 16, current(a))
}

func TestTheBaselineIsMeasuredAgainWithJitter(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 0)
	probed(t, a, clock, 10*time.Millisecond)
	rounds(a, clock, 2*time.Second, 100, 10*time.Millisecond)
	require.Equal(t, 64, current(a))
	for !a.grad.probing {
		round(a, clock, Booking, 100, 20*time.Millisecond)
	}
	require.Equal(t, 4, current(a), "the probe holds the limit at its minimum")
	for a.grad.probing {
		round(a, clock, Booking, 100, 20*time.Millisecond)
	}
	require.Equal(t, 20*time.Millisecond, a.grad.base["POST /rides"].rtt, "the baseline measured again")
	require.Greater(t, current(a), 4, "the limit given back")
}

func TestLimitBacksOffAtOnceOnSignals(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)}
	var sig Signals
	a := NewAdmission(AdmissionConfig{Min: 4, Max: 64, Now: clock.now, Rand: func(int) int { return 0 },
		Signals: func() Signals { return sig }})
	probed(t, a, clock, 10*time.Millisecond)
	rounds(a, clock, 2*time.Second, 100, 10*time.Millisecond)
	require.Equal(t, 64, current(a))

	// A client gone before its answer: at once, once a window.
	tk, _, _ := admitNow(a, Booking)
	tk.Done("POST /rides", ClientGone)
	require.Equal(t, 58, current(a))
	tk, _, _ = admitNow(a, Booking)
	tk.Done("POST /rides", ClientGone)
	require.Equal(t, 58, current(a), "once a window")

	// Serialization failures in more than one answer in fifty, or nine
	// acquires in ten that waited for a connection, at the window's end.
	clock.advance(gradientWindow)
	round(a, clock, Booking, 1, 10*time.Millisecond) // closes the window
	before := a.grad.limit
	sig.TxRetries += 5
	for range 10 {
		round(a, clock, Booking, 10, 10*time.Millisecond)
	}
	require.Less(t, a.grad.limit, before, "serialization failures")
	before = a.grad.limit
	sig.Acquires += 100
	sig.WaitedAcquires += 95
	for range 10 {
		round(a, clock, Booking, 10, 10*time.Millisecond)
	}
	require.Less(t, a.grad.limit, before, "a standing wait for a pooled connection")
}

func TestAnOperationFirstSeenBringsOneProbeSoon(t *testing.T) {
	t.Parallel()
	a, clock := setup(t, 0)
	probed(t, a, clock, 10*time.Millisecond)
	const refund = "POST /rides/{id}/refund"
	served := func(rtt time.Duration) {
		tk, _, _ := admitNow(a, Priority)
		clock.advance(rtt)
		tk.Done(refund, Served)
	}
	served(20 * time.Millisecond)
	require.Equal(t, baseline{rtt: 20 * time.Millisecond}, a.grad.base[refund], "its fastest answer stands in")
	require.Equal(t, probeSoon, a.grad.nextProbe.Sub(clock.now()), "a probe follows within a second")

	// The probe comes and goes with bookings only: the refund's baseline
	// stays provisional, and its next, faster answer lowers it without
	// bringing another probe early.
	for !a.grad.probing {
		round(a, clock, Booking, 4, 10*time.Millisecond)
	}
	for a.grad.probing {
		round(a, clock, Booking, 4, 10*time.Millisecond)
	}
	next := a.grad.nextProbe
	served(5 * time.Millisecond)
	require.Equal(t, baseline{rtt: 5 * time.Millisecond}, a.grad.base[refund])
	require.Equal(t, next, a.grad.nextProbe)
}
