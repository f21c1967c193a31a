package limits

import "github.com/prometheus/client_golang/prometheus"

// Reasons a request is refused before it reaches the service, the label
// of the refusal metric.
const (
	ReasonRiderWrites  = "rider_writes"
	ReasonRiderReads   = "rider_reads"
	ReasonAuthFailures = "auth_failures"
	// ReasonRiderConcurrency: the credential's requests in flight were at
	// its concurrency limit (429).
	ReasonRiderConcurrency = "rider_concurrency"
	// ReasonOverloaded: the admission control refused it (503); its own
	// metric says by class and why.
	ReasonOverloaded = "overloaded"
)

// Reasons of atomicrides_requests_refused_total, which counts every
// refusal by reason and class: the credential's own budgets (429) apart
// from the service's capacity (503).
const (
	// RefusalRiderRate: the credential's budget of writes or reads (429).
	RefusalRiderRate = "rider_rate"
	// RefusalRiderConcurrency: the credential's requests in flight (429).
	RefusalRiderConcurrency = "rider_concurrency"
	// RefusalAuthFailures: the address's failed authentications (429).
	RefusalAuthFailures = "auth_failures"
	// RefusalQueueTimeout, RefusalQueueFull and RefusalClientGone: the
	// admission control (503, or no answer to a client gone).
	RefusalQueueTimeout = "admission_queue_timeout"
	RefusalQueueFull    = "admission_queue_full"
	RefusalClientGone   = "admission_client_gone"
)

// refusalOf names each reason of the older metrics in the newer one.
var refusalOf = map[string]string{
	ReasonRiderWrites:      RefusalRiderRate,
	ReasonRiderReads:       RefusalRiderRate,
	ReasonRiderConcurrency: RefusalRiderConcurrency,
	ReasonAuthFailures:     RefusalAuthFailures,
	RefusedFull:            RefusalQueueFull,
	RefusedQueueTimeout:    RefusalQueueTimeout,
	RefusedClientGone:      RefusalClientGone,
}

// Metrics counts refused requests by reason, the admission control's
// admissions, refusals and back-offs, and reports whether the shared
// limiter fell back to its in-process buckets. A nil *Metrics counts
// nothing.
type Metrics struct {
	refused  *prometheus.CounterVec
	byClass  *prometheus.CounterVec
	fallback prometheus.Gauge

	admittedC *prometheus.CounterVec
	refusedC  *prometheus.CounterVec
	backoffs  *prometheus.CounterVec
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_http_refused_total",
			Help: "Requests refused before they reached the service, by reason: a rider's write or read budget (429), " +
				"a credential's requests in flight (429 rider_concurrency), an address's failed authentications (429), " +
				"the admission control (503 overloaded). atomicrides_requests_refused_total says it by class too.",
		}, []string{"reason"}),
		byClass: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_requests_refused_total",
			Help: "Requests refused before their work, by reason and class. The client's own budgets answer 429: rider_rate " +
				"(the credential's writes or reads), rider_concurrency (its requests in flight), auth_failures (the address's failed " +
				"authentications). The service's capacity answers 503: admission_queue_timeout (waited past its wait), " +
				"admission_queue_full (the queue at its cap); admission_client_gone: the client left while it waited.",
		}, []string{"reason", "class"}),
		fallback: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "atomicrides_ratelimit_redis_fallback",
			Help: "1 while REDIS_URL is set but Redis does not answer, so each replica enforces its own in-process budgets.",
		}),
		admittedC: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_admission_admitted_total",
			Help: "Requests the admission control admitted, by class (priority, booking, list).",
		}, []string{"class"}),
		refusedC: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_admission_refused_total",
			Help: "Requests the admission control refused (503), by class and reason: full (the class's share and the queue were full), " +
				"queue_timeout (waited in the queue past its timeout), client_gone (the client left while it waited).",
		}, []string{"class", "reason"}),
		backoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_admission_backoffs_total",
			Help: "Times the admission limit came down, by signal: latency above its baseline, a client gone before its answer, " +
				"serialization failures, a standing wait for a pooled connection.",
		}, []string{"signal"}),
	}
	reg.MustRegister(m.refused, m.byClass, m.fallback, m.admittedC, m.refusedC, m.backoffs)
	for _, r := range []string{ReasonRiderWrites, ReasonRiderReads, ReasonRiderConcurrency, ReasonAuthFailures, ReasonOverloaded} {
		m.refused.WithLabelValues(r)
	}
	for _, c := range Classes {
		for _, r := range []string{RefusalRiderRate, RefusalRiderConcurrency, RefusalAuthFailures, RefusalQueueTimeout, RefusalQueueFull, RefusalClientGone} {
			m.byClass.WithLabelValues(r, c.String())
		}
	}
	for _, c := range Classes {
		m.admittedC.WithLabelValues(c.String())
		for _, r := range []string{RefusedFull, RefusedQueueTimeout, RefusedClientGone} {
			m.refusedC.WithLabelValues(c.String(), r)
		}
	}
	for _, s := range []string{SignalLatency, SignalClientGone, SignalTxRetries, SignalPoolWait} {
		m.backoffs.WithLabelValues(s)
	}
	return m
}

// Refused counts a request of class c refused for reason (one of the
// Reason constants).
func (m *Metrics) Refused(reason string, c Class) {
	if m != nil {
		m.refused.WithLabelValues(reason).Inc()
		m.byClass.WithLabelValues(refusalOf[reason], c.String()).Inc()
	}
}

func (m *Metrics) admitted(c Class) {
	if m != nil {
		m.admittedC.WithLabelValues(c.String()).Inc()
	}
}

func (m *Metrics) admissionRefused(c Class, reason string) {
	if m != nil {
		m.refusedC.WithLabelValues(c.String(), reason).Inc()
		m.byClass.WithLabelValues(refusalOf[reason], c.String()).Inc()
		if reason != RefusedClientGone {
			// Answered 503; a client gone gets no answer.
			m.refused.WithLabelValues(ReasonOverloaded).Inc()
		}
	}
}

func (m *Metrics) backoff(signal string) {
	if m != nil {
		m.backoffs.WithLabelValues(signal).Inc()
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

// admissionCollector reports an Admission's gauges at each scrape.
type admissionCollector struct {
	a                                    *Admission
	limit, min, max, retryAfter, inFl, q *prometheus.Desc
}

// Collector returns the collector of a's gauges: the limit and its bounds,
// the requests in flight and queued by class, and the Retry-After base.
func (a *Admission) Collector() prometheus.Collector {
	return &admissionCollector{a: a,
		limit:      prometheus.NewDesc("atomicrides_admission_limit", "The admission control's concurrency limit: requests in flight it admits, the exempt ones aside.", nil, nil),
		min:        prometheus.NewDesc("atomicrides_admission_limit_min", "The lower bound of the admission limit.", nil, nil),
		max:        prometheus.NewDesc("atomicrides_admission_limit_max", "The upper bound of the admission limit.", nil, nil),
		retryAfter: prometheus.NewDesc("atomicrides_admission_retry_after_seconds", "The Retry-After a refusal gets now before its spread: the requests waiting against those served in the last second.", nil, nil),
		inFl:       prometheus.NewDesc("atomicrides_admission_in_flight", "Admitted requests in flight, by class.", []string{"class"}, nil),
		q:          prometheus.NewDesc("atomicrides_admission_queued", "Requests waiting in the admission queue, by class.", []string{"class"}, nil),
	}
}

func (c *admissionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.limit, c.min, c.max, c.retryAfter, c.inFl, c.q} {
		ch <- d
	}
}

func (c *admissionCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.a.Stats()
	ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(s.Limit))
	ch <- prometheus.MustNewConstMetric(c.min, prometheus.GaugeValue, float64(s.Min))
	ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(s.Max))
	ch <- prometheus.MustNewConstMetric(c.retryAfter, prometheus.GaugeValue, float64(s.RetryAfter))
	for k := Exempt; k < numClasses; k++ {
		ch <- prometheus.MustNewConstMetric(c.inFl, prometheus.GaugeValue, float64(s.InFlight[k]), k.String())
		if k != Exempt {
			ch <- prometheus.MustNewConstMetric(c.q, prometheus.GaugeValue, float64(s.Queued[k]), k.String())
		}
	}
}
