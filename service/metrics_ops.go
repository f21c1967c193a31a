package service

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/atomicrides/atomicrides/service/idem"
)

// opsMetrics are the gauges and counters that operators alert on beyond
// the request path: whether the periodic passes run, what they left for a
// person, and what the processor said about the service's configuration.
type opsMetrics struct {
	stripeConfigErrors *prometheus.CounterVec
	reconcileOrphans   *prometheus.GaugeVec
	reconcileLastRun   prometheus.Gauge
	completerLastRun   prometheus.Gauge
	completerDead      prometheus.Gauge
	reaperLastRun      prometheus.Gauge
}

// paymentOps are the op labels of the processor calls (meteredPayments).
var paymentOps = []string{
	"customer_create", "customer_find", "charge_create", "charge_find", "charge_get", "charge_list_since",
	"refund_create", "refund_list", "refund_list_since", "payment_get", "payment_cancel", "payment_details", "payment_capture",
}

// ReconcileOrphanKinds are the kind labels of atomicrides_reconcile_orphans:
// a charge or a refund at the processor that no ride records, and a ride
// recorded as charged whose charge the processor lacks.
// double_charge is a ride charged at two processors: a charge at one
// processor under the charge key of a ride recorded as charged at another
// (the commit that routed the ride was lost, and the request was routed
// anew while its first processor was down). hold is a trip's hold no ride
// records (its booking was lost): the orphan pass releases it.
var ReconcileOrphanKinds = []string{"charge", "refund", "missing_charge", "double_charge", "hold"}

func newOpsMetrics() *opsMetrics {
	return &opsMetrics{
		stripeConfigErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_stripe_config_errors_total",
			Help: "Processor errors caused by the service's configuration rather than the request: authentication, permission, a missing object the service created, idempotency errors. Each needs an operator.",
		}, []string{"processor", "operation"}),
		reconcileOrphans: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "atomicrides_reconcile_orphans",
			Help: "As of the last reconciliation: charges and refunds at the processor that no ride records (charge, refund), and rides recorded as charged that the processor lacks (missing_charge).",
		}, []string{"kind"}),
		reconcileLastRun: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_reconcile_last_run_timestamp_seconds",
			Help: "Unix time of the last completed reconciliation with the processor; 0 before the first.",
		}),
		completerLastRun: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_completer_last_run_timestamp_seconds",
			Help: "Unix time of the last completed completer pass in this process; 0 in a process that has not run one (only River's leader runs them).",
		}),
		completerDead: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_completer_dead_letters",
			Help: "Unfinished idempotency keys whose completion was discarded after its last attempt, as of the last completer pass: each waits for an operator.",
		}),
		reaperLastRun: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_reaper_last_run_timestamp_seconds",
			Help: "Unix time of the last completed reaper pass in this process; 0 in a process that has not run one.",
		}),
	}
}

func (o *opsMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		o.stripeConfigErrors, o.reconcileOrphans, o.reconcileLastRun,
		o.completerLastRun, o.completerDead, o.reaperLastRun,
	}
}

// initSeries creates every labelled series the alert rules and the
// dashboard read, at zero, so that /metrics shows them before the first
// event and a rate over them is 0 rather than absent.
func (m *metrics) initSeries(processors []string) {
	for _, proc := range processors {
		for _, op := range paymentOps {
			m.ops.stripeConfigErrors.WithLabelValues(proc, op)
			m.paymentSeconds.WithLabelValues(proc, op)
			for _, outcome := range paymentOutcomes {
				m.paymentCalls.WithLabelValues(proc, op, outcome)
			}
		}
		for _, to := range []string{"closed", "half-open", "open"} {
			m.circuitChanges.WithLabelValues(proc, to)
		}
		for _, reason := range []string{"key_age", "database_gap"} {
			m.keyLookups.WithLabelValues(proc, reason)
		}
		m.actionsRequired.WithLabelValues(proc)
		m.tripMetrics.initSeries(proc)
	}
	for _, outcome := range []string{RideActionCharged, RideActionDeclined, RideActionExpired} {
		for _, via := range []string{actionViaEvent, actionViaReturn, actionViaExpiry} {
			m.rideActions.WithLabelValues(outcome, via)
		}
	}
	for _, kind := range ReconcileOrphanKinds {
		m.ops.reconcileOrphans.WithLabelValues(kind)
	}
	m.eventsPassRecorded.WithLabelValues(InboxSourceStripe)
	for _, kind := range []string{"charge", "refund"} {
		m.orphansUnresolved.WithLabelValues(kind)
	}
	for _, status := range []DisputeStatus{DisputeOpen, DisputeWon, DisputeLost} {
		m.disputes.WithLabelValues(string(status))
	}
	for _, r := range InboxRejectReasons {
		m.inboxRejected.WithLabelValues(InboxSourceStripe, string(r))
	}
	for _, outcome := range []string{"finished", "already_finished", "in_use", "unavailable", "error", "not_found"} {
		m.completions.WithLabelValues(outcome)
	}
	for flow, points := range map[string][]RecoveryPoint{
		"ride.create": {RecoveryPointStarted, RecoveryPointRideCreated, idem.PhaseClaim},
		"ride.refund": {RecoveryPointStarted, RecoveryPointRefundCreated, idem.PhaseClaim},
	} {
		for _, p := range points {
			m.phaseSeconds.WithLabelValues(flow, string(p))
		}
	}
}

// stripeConfigError counts a configuration-class processor error of op.
func (m *metrics) stripeConfigError(processor, op string) {
	m.ops.stripeConfigErrors.WithLabelValues(processor, op).Inc()
}

// ReconcileObserved records a finished reconciliation with the processor:
// orphans by kind (ReconcileOrphanKinds; a kind left out is set to 0) and
// its time.
func (s *Service) ReconcileObserved(orphans map[string]int, at time.Time) {
	for _, kind := range ReconcileOrphanKinds {
		s.metrics.ops.reconcileOrphans.WithLabelValues(kind).Set(float64(orphans[kind]))
	}
	s.metrics.ops.reconcileLastRun.Set(float64(at.Unix()))
}

// deadLettersScanLimit bounds the discarded completions one measure reads.
const deadLettersScanLimit = 1000

// DeadLettersMeasure counts the unfinished keys whose completion was
// discarded (KeysDead, up to 1000) into the
// atomicrides_completer_dead_letters gauge, and returns the count. The
// completer runs it on every pass.
func (s *Service) DeadLettersMeasure(ctx context.Context) (int, error) {
	keys, err := s.KeysDead(ctx, deadLettersScanLimit)
	if err != nil {
		return 0, err
	}
	s.metrics.ops.completerDead.Set(float64(len(keys)))
	return len(keys), nil
}

// RidesWaitingMeasure counts the rides waiting for their rider into the
// atomicrides_rides_waiting_for_rider gauge, and returns the count. The
// completer runs it on every pass.
func (s *Service) RidesWaitingMeasure(ctx context.Context) (int64, error) {
	n, err := s.queries.RideActionsWaiting(ctx, s.pool)
	if err != nil {
		return 0, Internal(err)
	}
	s.metrics.ridesWaiting.Set(float64(n))
	return n, nil
}
