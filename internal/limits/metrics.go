package limits

import "github.com/prometheus/client_golang/prometheus"

// Reasons a request is refused, the label of the refusal metric.
const (
	ReasonRiderWrites  = "rider_writes"
	ReasonRiderReads   = "rider_reads"
	ReasonAuthFailures = "auth_failures"
	ReasonInFlight     = "in_flight"
	ReasonDBWait       = "db_wait"
)

// Metrics counts refused requests by reason and reports whether the shared
// limiter fell back to its in-process buckets. A nil *Metrics counts
// nothing.
type Metrics struct {
	refused  *prometheus.CounterVec
	fallback prometheus.Gauge
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_http_refused_total",
			Help: "Requests refused before they reached the service, by reason: a rider's write or read budget (429), " +
				"an address's failed authentications (429), the in-flight limit or the database-connection wait (503).",
		}, []string{"reason"}),
		fallback: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_ratelimit_redis_fallback",
			Help: "1 while REDIS_URL is set but Redis does not answer, so each replica enforces its own in-process budgets.",
		}),
	}
	reg.MustRegister(m.refused, m.fallback)
	for _, r := range []string{ReasonRiderWrites, ReasonRiderReads, ReasonAuthFailures, ReasonInFlight, ReasonDBWait} {
		m.refused.WithLabelValues(r)
	}
	return m
}

// Refused counts a request refused for reason.
func (m *Metrics) Refused(reason string) {
	if m != nil {
		m.refused.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) setFallback(on bool) {
	if m == nil {
		return
	}
	if on {
		m.fallback.Set(1)
	} else {
		m.fallback.Set(0)
	}
}
