package settlements

import "github.com/prometheus/client_golang/prometheus"

// DiscrepancyKinds are the kind labels of
// atomicrides_settlement_discrepancies: a line naming no charge or refund
// of ours, a line whose amount or currency differs from ours, and a charge
// or refund of ours that no line settled within the maximum age.
var DiscrepancyKinds = []string{"unknown_reference", "mismatch", "not_settled"}

// settlementMetrics count what the settlement files brought.
type settlementMetrics struct {
	files         *prometheus.CounterVec
	lines         *prometheus.CounterVec
	discrepancies *prometheus.GaugeVec
	flagged       prometheus.Gauge
	lastFetch     prometheus.Gauge
}

func newSettlementMetrics() *settlementMetrics {
	m := &settlementMetrics{
		files: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_settlement_files_total",
			Help: "Settlement files received, by outcome: new, duplicate (same name and content, nothing written), new_version (same name, other content: flagged), rejected (unreadable header).",
		}, []string{"outcome"}),
		lines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_settlement_lines_total",
			Help: "Settlement lines by outcome: matched, unknown, mismatch, none (fees, disputes, payouts), duplicate (applied before), quarantined.",
		}, []string{"outcome"}),
		discrepancies: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "atomicrides_settlement_discrepancies",
			Help: "As of the last settlement check: lines naming nothing of ours (unknown_reference), lines differing from ours (mismatch), and charges or refunds of ours unsettled past the maximum age (not_settled).",
		}, []string{"kind"}),
		flagged: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_settlement_flagged_files",
			Help: "As of the last settlement check: settlement files flagged for an operator (re-uploads under a known name, rejected files).",
		}),
		lastFetch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_settlement_last_fetch_timestamp_seconds",
			Help: "Unix time of the last completed fetch of the bank's inbox in this process; 0 before the first.",
		}),
	}
	for _, o := range []string{"new", "duplicate", "new_version", "rejected"} {
		m.files.WithLabelValues(o)
	}
	for _, o := range []string{"matched", "unknown", "mismatch", "none", "duplicate", "quarantined"} {
		m.lines.WithLabelValues(o)
	}
	for _, k := range DiscrepancyKinds {
		m.discrepancies.WithLabelValues(k)
	}
	return m
}

func (m *settlementMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.files, m.lines, m.discrepancies, m.flagged, m.lastFetch}
}

func (m *settlementMetrics) received(r Receipt) {
	switch {
	case r.Duplicate:
		m.files.WithLabelValues("duplicate").Inc()
	case r.Flagged:
		m.files.WithLabelValues("new_version").Inc()
	default:
		m.files.WithLabelValues("new").Inc()
	}
}

func (m *settlementMetrics) rejected() { m.files.WithLabelValues("rejected").Inc() }

// batch counts the lines of a committed batch.
func (m *settlementMetrics) batch(b settlementBatchResult) {
	for match, n := range b.byMatch {
		m.lines.WithLabelValues(match).Add(float64(n))
	}
	m.lines.WithLabelValues("duplicate").Add(float64(b.duplicate))
	m.lines.WithLabelValues("quarantined").Add(float64(b.quarantined))
}
