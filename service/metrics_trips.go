package service

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// tripMetrics are the trips' (trips.go, ride_cancel.go, balances.go):
// trips ended by how, captures failed, extra payments by outcome, and the
// gauges of holds outstanding and balances due the completer measures.
type tripMetrics struct {
	tripsEnded     *prometheus.CounterVec
	capturesFailed *prometheus.CounterVec
	tripExtras     *prometheus.CounterVec
	// holdsOrphanReleased: holds whose booking was lost, released by the
	// orphan pass.
	holdsOrphanReleased *prometheus.CounterVec
	holds               prometheus.Gauge
	oldestHold          prometheus.Gauge
	capturing           prometheus.Gauge
	captureFailed       prometheus.Gauge
	balancesDue         prometheus.Gauge
	balanceDue          prometheus.Gauge
	// cancelsFailed: cancels the processor refused after taking them on;
	// cancelFailedWaiting: the rides that still wait after one.
	cancelsFailed       *prometheus.CounterVec
	cancelFailedWaiting prometheus.Gauge
}

func newTripMetrics() tripMetrics {
	return tripMetrics{
		tripsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_trips_ended_total",
			Help: "Trips whose hold ended, by processor and how: completed (the fare captured), cancelled or expired (the hold released).",
		}, []string{"processor", "status"}),
		capturesFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_captures_failed_total",
			Help: "Captures of a completed trip's fare that the processor failed (Adyen's CAPTURE_FAILED, or a hold gone before its capture), by processor: each is an operator's to follow up (docs/operations.md#capture-failed).",
		}, []string{"processor"}),
		tripExtras: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_trip_extra_payments_total",
			Help: "Fares above their hold charged as a payment of their own, by processor and outcome: charged, due (declined: the rider owes a balance), paid (a balance paid later).",
		}, []string{"processor", "outcome"}),
		holdsOrphanReleased: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_holds_orphan_released_total",
			Help: "Holds whose booking the database lost (a restore), released by the orphan pass, by processor: they took no money.",
		}, []string{"processor"}),
		holds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_holds_outstanding",
			Help: "Trips holding their rider's money (authorized, or being cancelled), as of the last completer pass.",
		}),
		oldestHold: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_hold_oldest_age_seconds",
			Help: "Age of the oldest outstanding hold (since its booking), as of the last completer pass; 0 when none.",
		}),
		capturing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_trips_capturing",
			Help: "Completed trips whose capture the processor has not confirmed yet, as of the last completer pass.",
		}),
		captureFailed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_trips_capture_failed",
			Help: "Rides whose capture the processor failed, as of the last completer pass.",
		}),
		balancesDue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_balances_due",
			Help: "Rides whose rider owes the fare above the hold, as of the last completer pass.",
		}),
		balanceDue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_balance_due_cents",
			Help: "What riders owe in all, in minor units of their rides' currencies, as of the last completer pass.",
		}),
		cancelsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_cancels_failed_total",
			Help: "Cancels of a ride's payment that the processor took on and then refused (Adyen's CANCELLATION or TECHNICAL_CANCEL with success false), by processor (docs/operations.md#cancel-failed).",
		}, []string{"processor"}),
		cancelFailedWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_rides_cancel_failed",
			Help: "Rides still waiting (requires_action or cancelling) after the processor refused their payment's cancel, as of the last completer pass: each is an operator's.",
		}),
	}
}

func (t tripMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{t.tripsEnded, t.capturesFailed, t.tripExtras, t.holdsOrphanReleased, t.holds, t.oldestHold,
		t.capturing, t.captureFailed, t.balancesDue, t.balanceDue, t.cancelsFailed, t.cancelFailedWaiting}
}

// initSeries makes every labelled series of proc exist from the start.
func (t tripMetrics) initSeries(proc string) {
	for _, st := range []RideChargeStatus{RideChargeCompleted, RideChargeCancelled, RideChargeExpired} {
		t.tripsEnded.WithLabelValues(proc, string(st))
	}
	t.capturesFailed.WithLabelValues(proc)
	t.cancelsFailed.WithLabelValues(proc)
	t.holdsOrphanReleased.WithLabelValues(proc)
	for _, o := range []string{ExtraCharged, ExtraDue, ExtraPaid} {
		t.tripExtras.WithLabelValues(proc, o)
	}
}

// TripsMeasure reads the trips' gauges (holds outstanding and the oldest's
// age, captures waiting and failed, balances due, rides whose cancel
// failed) into their metrics. The
// completer runs it on every pass.
func (s *Service) TripsMeasure(ctx context.Context) error {
	g, err := s.queries.RideTripGauges(ctx, s.pool)
	if err != nil {
		return Internal(err)
	}
	t := s.metrics.tripMetrics
	t.holds.Set(float64(g.Holds))
	t.oldestHold.Set(g.OldestHoldSeconds)
	t.capturing.Set(float64(g.Capturing))
	t.captureFailed.Set(float64(g.CaptureFailed))
	t.balancesDue.Set(float64(g.BalancesDue))
	t.balanceDue.Set(float64(g.BalanceDueCents))
	failed, err := s.queries.RideCancelsFailedCount(ctx, s.pool)
	if err != nil {
		return Internal(err)
	}
	t.cancelFailedWaiting.Set(float64(failed))
	return nil
}
