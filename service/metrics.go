package service

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the service's counters: atomics for Stats, and Prometheus
// collectors registered on Config.Registerer.
type metrics struct {
	txRetries atomic.Int64
	replays   atomic.Int64
	conflicts atomic.Int64

	phaseSeconds    *prometheus.HistogramVec
	paymentCalls    *prometheus.CounterVec
	paymentSeconds  *prometheus.HistogramVec
	completions     *prometheus.CounterVec
	completerQueued prometheus.Counter
	reaped          prometheus.Counter
	pastHorizon     prometheus.Gauge
	circuitChanges  *prometheus.CounterVec
	inboxReceived   *prometheus.CounterVec
	inboxRejected   *prometheus.CounterVec
	inboxApplied    *prometheus.CounterVec
	// actionsRequired, rideActions and ridesWaiting: rides whose rider's
	// bank asked for authentication (ride_actions.go).
	actionsRequired *prometheus.CounterVec
	rideActions     *prometheus.CounterVec
	ridesWaiting    prometheus.Gauge
	disputes        *prometheus.CounterVec
	tripMetrics
	// eventsPassRecorded and orphansUnresolved: the events pass and the
	// orphan pass (events_pass.go, orphans.go).
	eventsPassRecorded *prometheus.CounterVec
	orphansUnresolved  *prometheus.GaugeVec
	// keyLookups, gapsFound and gapsOpen: payments looked up before a key
	// is sent again, and the database's gaps (database_gaps.go).
	keyLookups *prometheus.CounterVec
	gapsFound  prometheus.Counter
	gapsOpen   prometheus.Gauge
	ops        *opsMetrics
}

func newMetrics(reg prometheus.Registerer, processors []string) (*metrics, error) {
	m := &metrics{
		phaseSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "atomicrides_phase_duration_seconds",
			Help:    "Duration of atomic phases (one transaction each), by flow and the recovery point they leave.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"flow", "from"}),
		paymentCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_payment_calls_total",
			Help: "Calls to the payment processors by processor, operation and outcome (ok, declined, invalid, configuration, unavailable).",
		}, []string{"processor", "op", "outcome"}),
		paymentSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "atomicrides_payment_call_duration_seconds",
			Help:    "Duration of calls to the payment processors, retries included, by processor and operation.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}, []string{"processor", "op"}),
		completions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_completer_completions_total",
			Help: "Abandoned requests driven by the completer, by outcome: finished, already_finished, in_use (another holds the lease), unavailable (processor), error.",
		}, []string{"outcome"}),
		completerQueued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "atomicrides_completer_queued_total",
			Help: "Completion jobs inserted for abandoned requests.",
		}),
		reaped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "atomicrides_reaper_deleted_keys_total",
			Help: "Finished idempotency keys deleted by the reaper.",
		}),
		pastHorizon: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_reaper_unfinished_past_retention",
			Help: "Unfinished idempotency keys older than the retention, never deleted: an operator must look at them.",
		}),
		circuitChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_processor_circuit_changes_total",
			Help: "Changes of a payment processor's circuit breaker, by processor and the state entered (closed, half-open, open).",
		}, []string{"processor", "to"}),
		inboxReceived: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_inbox_received_total",
			Help: "Inbound messages (webhooks) verified, by source and outcome: recorded (new, its job queued) or duplicate (already recorded; nothing written).",
		}, []string{"source", "outcome"}),
		inboxRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_inbox_rejected_total",
			Help: "Inbound messages refused before anything was recorded, by source and reason: missing_signature, bad_signature, stale_timestamp, not_an_event, too_large.",
		}, []string{"source", "reason"}),
		inboxApplied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_inbox_applied_total",
			Help: "Inbound events applied (once each), by source, kind and outcome; ignored_other_deployment and ignored_type are acknowledged and ignored, orphan_charge waits for the orphan policy.",
		}, []string{"source", "kind", "outcome"}),
		actionsRequired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_ride_actions_required_total",
			Help: "Bookings answered 202: the rider's bank asked the rider to authenticate the payment, by processor.",
		}, []string{"processor"}),
		rideActions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_ride_actions_total",
			Help: "Rides that waited for their rider and moved on, by outcome (ride_charged, ride_declined, ride_expired) and by what moved them (event: a processor's event or notification; return: the rider's return; expiry: the deadline's job).",
		}, []string{"outcome", "via"}),
		ridesWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_rides_waiting_for_rider",
			Help: "Rides waiting for their rider to authenticate the payment, as of the last completer pass; 0 in a process that ran none.",
		}),
		disputes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_disputes_total",
			Help: "Rides whose dispute (chargeback) moved to a status: disputed, won, lost.",
		}, []string{"status"}),
		eventsPassRecorded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_events_pass_recorded_total",
			Help: "Events the events pass found at the processor that the inbox lacked (lost with a restore or a failover, or delivered late), each recorded and applied once, by source.",
		}, []string{"source"}),
		orphansUnresolved: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "atomicrides_orphans_unresolved_past_grace",
			Help: "As of the last orphan pass: charges and refunds at the processor that no ride records and the orphan policy has not resolved although older than the grace period and a pass interval (kind charge, refund); 0 in a process that ran no pass.",
		}, []string{"kind"}),
		keyLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_processor_key_lookups_total",
			Help: "Payments and refunds looked up at the processor before their key is sent again, by processor and reason: key_age (the key's own record is past the processor's key window), database_gap (the database may have lost an earlier send of it: a restore or a failover).",
		}, []string{"processor", "reason"}),
		gapsFound: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "atomicrides_database_gaps_found_total",
			Help: "Gaps in the database's heartbeat this process found: a restore, a failover or a time when no process ran, whose commits may be lost.",
		}),
		gapsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_database_gaps_open",
			Help: "Gaps in the database's heartbeat the orphan pass has not covered yet, as of this process's last beat.",
		}),
		tripMetrics: newTripMetrics(),
		ops:         newOpsMetrics(),
	}
	m.initSeries(processors)
	collectors := []prometheus.Collector{
		m.phaseSeconds, m.paymentCalls, m.paymentSeconds, m.completions, m.completerQueued,
		m.reaped, m.pastHorizon, m.circuitChanges, m.inboxReceived, m.inboxRejected, m.inboxApplied, m.disputes,
		m.actionsRequired, m.rideActions, m.ridesWaiting,
		m.eventsPassRecorded, m.orphansUnresolved, m.keyLookups, m.gapsFound, m.gapsOpen,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "atomicrides_idempotency_replays_total",
			Help: "Responses replayed from finished idempotency keys.",
		}, func() float64 { return float64(m.replays.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "atomicrides_idempotency_conflicts_total",
			Help: "Requests refused with 409 because another request held the key.",
		}, func() float64 { return float64(m.conflicts.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "atomicrides_tx_retries_total",
			Help: "Transactions rerun after a serialization failure, a deadlock or a random id drawn twice.",
		}, func() float64 { return float64(m.txRetries.Load()) }),
	}
	collectors = append(collectors, m.tripMetrics.collectors()...)
	for _, c := range append(collectors, m.ops.collectors()...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) txRetry() { m.txRetries.Add(1) }

func (m *metrics) phase(flow string, from RecoveryPoint, d time.Duration) {
	m.phaseSeconds.WithLabelValues(flow, string(from)).Observe(d.Seconds())
}

func (m *metrics) payment(processor, op string, d time.Duration, err error) {
	m.paymentSeconds.WithLabelValues(processor, op).Observe(d.Seconds())
	m.paymentCalls.WithLabelValues(processor, op, paymentOutcome(err)).Inc()
}

func (m *metrics) circuitChanged(processor, to string) {
	m.circuitChanges.WithLabelValues(processor, to).Inc()
}
