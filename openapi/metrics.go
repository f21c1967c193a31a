package openapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// routeRideCreate is the route pattern of POST /rides, as the mux reports it.
const routeRideCreate = "POST /rides"

// httpMetrics counts and times requests by route (the mux pattern that
// served them, "unmatched" for none) and status.
type httpMetrics struct {
	requests *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atomicrides_http_requests_total",
			Help: "HTTP requests by route and status.",
		}, []string{"route", "status"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "atomicrides_http_request_duration_seconds",
			Help:    "HTTP request durations by route.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"route"}),
	}
	reg.MustRegister(m.requests, m.seconds)
	// The route the alert rules watch exists before its first request.
	m.seconds.WithLabelValues(routeRideCreate)
	m.requests.WithLabelValues(routeRideCreate, strconv.Itoa(http.StatusCreated))
	return m
}

func (m *httpMetrics) observe(route string, status int, d time.Duration) {
	if m == nil {
		return
	}
	if route == "" {
		route = "unmatched"
	}
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.seconds.WithLabelValues(route).Observe(d.Seconds())
}

// metricsHandler serves the registry in the Prometheus text format to
// operators: Bearer ADMIN_TOKEN (Prometheus' authorization setting) or HTTP
// Basic with the token as password. An authorised scrape is never limited;
// a wrong credential counts against the address's failed authentications.
func metricsHandler(token string, guard authGuard, g prometheus.Gatherer) http.Handler {
	h := promhttp.HandlerFor(g, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bt := bearer(r.Header.Get("Authorization"))
		if tokenEqual(bt, token) {
			h.ServeHTTP(w, r)
			return
		}
		if bt != "" {
			if guard.guardHTTP(w, r) {
				return
			}
			guard.failed(r.Context(), clientIP(r.Context()))
		}
		requireAdminBasic(token, guard, h).ServeHTTP(w, r)
	})
}

// MetricsHandler serves g without authentication, for a listener of its own
// that only the monitoring network reaches (METRICS_ADDR).
func MetricsHandler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}
