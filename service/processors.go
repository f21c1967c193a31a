package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/atomicrides/atomicrides/dbgen"
)

// Names of the payment processors the service can route to. They are the
// values of rides.processor and processor_registrations.processor, and of
// the processor label of the metrics.
const (
	ProcessorStripe = "stripe"
	ProcessorAdyen  = "adyen"
)

// ProcessorNames returns every processor the service knows, in the default
// order of preference.
func ProcessorNames() []string { return []string{ProcessorStripe, ProcessorAdyen} }

// Processor is one payment processor the service may route to: its name
// (ProcessorStripe, ProcessorAdyen) and its adapter.
type Processor struct {
	Name     string
	Payments Payments
}

// Circuit breaker defaults, applied to zero Config fields.
const (
	// DefaultBreakerFailures is how many consecutive indeterminate outcomes
	// of calls to a processor open its circuit.
	DefaultBreakerFailures = 5
	// DefaultBreakerOpenFor is how long an open circuit keeps new bookings
	// away from its processor before it lets real traffic try again
	// (half-open).
	DefaultBreakerOpenFor = 30 * time.Second
	// breakerHalfOpenRequests is how many calls a half-open circuit lets
	// through; as many succeeding close it.
	breakerHalfOpenRequests = 3
)

// keyWindowed is implemented by adapters whose processor remembers keys for
// another time than ProcessorKeyWindow (Adyen: 31 days).
type keyWindowed interface{ KeyWindow() time.Duration }

// processor is a Processor as the service holds it: metered, traced and
// behind its circuit breaker.
type processor struct {
	name    string
	pay     Payments
	breaker *gobreaker.TwoStepCircuitBreaker[struct{}]
	window  time.Duration
}

// newProcessor wraps p's adapter: the breaker sees every call, the meter
// sees what the breaker answers too (a call refused by an open circuit is
// counted as unavailable).
//
// A processor alone (PROCESSORS=stripe) has no breaker: with nowhere else
// to route, its requests behave exactly as without routing.
func newProcessor(p Processor, alone bool, m *metrics, tracer trace.Tracer, logger *slog.Logger, failures uint32, openFor time.Duration) *processor {
	pr := &processor{name: p.Name, window: ProcessorKeyWindow}
	if w, ok := p.Payments.(keyWindowed); ok {
		pr.window = w.KeyWindow()
	}
	pr.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        p.Name,
		MaxRequests: breakerHalfOpenRequests,
		Timeout:     openFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		// Only an indeterminate outcome is a failure of the processor; a
		// caller giving up (its context done) says nothing about it.
		IsSuccessful: func(err error) bool { return err == nil || PaymentClassOf(err) != PaymentClassUnavailable },
		IsExcluded:   func(err error) bool { return errors.Is(err, context.Canceled) },
		OnStateChange: func(name string, from, to gobreaker.State) {
			m.circuitChanged(name, to.String())
			logger.Warn("payment processor circuit changed state", "processor", name, "from", from.String(), "to", to.String())
		},
	})
	var inner Payments = breakerPayments{p: p.Payments, cb: pr.breaker}
	if alone {
		pr.breaker, inner = nil, p.Payments
	}
	pr.pay = meteredPayments{
		p:         inner,
		processor: p.Name,
		m:         m,
		tracer:    tracer,
		logger:    logger,
	}
	return pr
}

// open reports whether the processor's circuit keeps new bookings away.
func (p *processor) open() bool { return p.breaker != nil && p.breaker.State() == gobreaker.StateOpen }

// circuitState is the processor's circuit state as a number for /metrics:
// 0 closed, 1 half-open, 2 open.
func (p *processor) circuitState() float64 {
	if p.breaker == nil {
		return 0
	}
	switch p.breaker.State() {
	case gobreaker.StateHalfOpen:
		return 1
	case gobreaker.StateOpen:
		return 2
	}
	return 0
}

// breakerPayments passes the calls that make something (customers,
// charges, refunds) through a circuit breaker; lookups and listings go
// straight to the processor, so that reconciliation and the adoption of
// earlier charges are never held back by a circuit. Only an
// indeterminate outcome (PaymentClassUnavailable) counts as a failure: a
// decline, a refusal or a configuration error is an answer from a working
// processor. A call the breaker refuses (open, or half-open and full) is
// never sent and answers PaymentClassUnavailable with Code
// PaymentCodeCircuitOpen: the request stays at its recovery point and is
// retried at the same processor with the same key.
type breakerPayments struct {
	p  Payments
	cb *gobreaker.TwoStepCircuitBreaker[struct{}]
}

// PaymentCodeCircuitOpen is the Code of the PaymentClassUnavailable error
// of a call the processor's open circuit did not let through.
const PaymentCodeCircuitOpen = "circuit_open"

func guard[T any](b breakerPayments, call func() (T, error)) (T, error) {
	done, err := b.cb.Allow()
	if err != nil {
		var zero T
		return zero, &PaymentError{
			Class: PaymentClassUnavailable, Kind: PaymentUnavailable, Code: PaymentCodeCircuitOpen,
			Message: "the processor's circuit is open: " + err.Error(), Err: err,
		}
	}
	v, err := call()
	done(err)
	return v, err
}

func (b breakerPayments) CustomerCreate(ctx context.Context, p CustomerCreateParams) (*Customer, error) {
	return guard(b, func() (*Customer, error) { return b.p.CustomerCreate(ctx, p) })
}

func (b breakerPayments) CustomerFind(ctx context.Context, key string) ([]*Customer, error) {
	return b.p.CustomerFind(ctx, key)
}

func (b breakerPayments) ChargeCreate(ctx context.Context, p ChargeCreateParams) (*Charge, error) {
	return guard(b, func() (*Charge, error) { return b.p.ChargeCreate(ctx, p) })
}

func (b breakerPayments) ChargeFind(ctx context.Context, p ChargeFindParams) ([]*Charge, error) {
	return b.p.ChargeFind(ctx, p)
}

func (b breakerPayments) PaymentGet(ctx context.Context, id string) (*Charge, error) {
	return b.p.PaymentGet(ctx, id)
}

func (b breakerPayments) PaymentCancel(ctx context.Context, p PaymentCancelParams) (*Charge, error) {
	return guard(b, func() (*Charge, error) { return b.p.PaymentCancel(ctx, p) })
}

func (b breakerPayments) PaymentDetails(ctx context.Context, p PaymentDetailsParams) (*Charge, error) {
	return guard(b, func() (*Charge, error) { return b.p.PaymentDetails(ctx, p) })
}

func (b breakerPayments) PaymentCapture(ctx context.Context, p PaymentCaptureParams) (*Charge, error) {
	return guard(b, func() (*Charge, error) { return b.p.PaymentCapture(ctx, p) })
}

func (b breakerPayments) ChargeGet(ctx context.Context, id string) (*Charge, error) {
	return b.p.ChargeGet(ctx, id)
}

func (b breakerPayments) ChargeListSince(ctx context.Context, since time.Time) ([]*Charge, error) {
	return b.p.ChargeListSince(ctx, since)
}

func (b breakerPayments) RefundCreate(ctx context.Context, p RefundCreateParams) (*Refund, error) {
	return guard(b, func() (*Refund, error) { return b.p.RefundCreate(ctx, p) })
}

func (b breakerPayments) RefundList(ctx context.Context, chargeID string) ([]*Refund, error) {
	return b.p.RefundList(ctx, chargeID)
}

func (b breakerPayments) RefundListSince(ctx context.Context, since time.Time) ([]*Refund, error) {
	return b.p.RefundListSince(ctx, since)
}

func (b breakerPayments) Budget() time.Duration { return b.p.Budget() }

// proc returns the processor named name. A name the database holds but
// this process was not configured with (PROCESSORS narrowed while rides of
// another processor are unfinished) is a configuration error: the request
// stays at its recovery point, it never moves to another processor.
func (s *Service) proc(name string) (*processor, error) {
	if p, ok := s.processors[name]; ok {
		return p, nil
	}
	return nil, &PaymentError{
		Class: PaymentClassConfiguration, Kind: PaymentUnavailable, Code: "processor_not_configured",
		Message: fmt.Sprintf("processor %q is not in PROCESSORS; its requests wait until it is", name),
		Err:     fmt.Errorf("processor %q not configured", name),
	}
}

// Processors returns the names of the configured processors, in order of
// preference.
func (s *Service) Processors() []string { return append([]string(nil), s.order...) }

// route chooses the processor of a new booking by the rider userID: the
// first, in order of preference, where the rider's payment source is not
// refused and whose circuit is not open. source is the payment source the
// booking is charged with ("" for the rider's current one, which a new
// booking takes). A rider refused everywhere goes to the first processor,
// whose charge answers 402 naming the refusal. When every processor that
// could take the rider has its circuit open, the booking is refused with
// 503 before anything is written.
func (s *Service) route(ctx context.Context, tx pgx.Tx, userID int64, source string, skip map[string]bool) (string, error) {
	refused := map[string]bool{}
	if len(s.order) > 1 {
		var (
			regs []*dbgen.ProcessorRegistration
			err  error
		)
		if source == "" {
			regs, err = s.queries.ProcessorRegistrationList(ctx, tx, userID)
		} else {
			regs, err = s.queries.ProcessorRegistrationListForSource(ctx, tx, userID, source)
		}
		if err != nil {
			return "", err
		}
		for _, r := range regs {
			if r.Status == registrationRefused {
				refused[r.Processor] = true
			}
		}
	}
	candidates := 0
	for _, name := range s.order {
		if refused[name] || skip[name] {
			continue
		}
		candidates++
		if !s.processors[name].open() {
			return name, nil
		}
	}
	if candidates == 0 {
		if skip != nil {
			return "", nil
		}
		return s.order[0], nil
	}
	return "", &Error{Code: CodeProcessorUnavailable, Message: "every payment processor is unavailable (circuits open); retry later"}
}

// Registration states of a rider's card at a processor.
const (
	registrationRegistered = "registered"
	registrationRefused    = "refused"
)

// Registration is a rider's card at one processor, as GET /users/{email}
// shows it.
type Registration struct {
	Processor string `json:"processor" enum:"stripe,adyen"`
	Status    string `json:"status" enum:"registered,refused" doc:"registered: the card is stored at the processor; refused: the processor refused the payment source (register another)"`
	// Reason is the processor's reason for a refusal.
	Reason    *string   `json:"reason,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// RegistrationsFromRows are the registrations of processor_registrations
// rows.
func RegistrationsFromRows(rows []*dbgen.ProcessorRegistration) []Registration {
	out := make([]Registration, len(rows))
	for i, r := range rows {
		out[i] = Registration{Processor: r.Processor, Status: r.Status, Reason: r.Reason, UpdatedAt: r.UpdatedAt.UTC()}
	}
	return out
}

// circuitCollector reports every processor's circuit state at each scrape
// (atomicrides_processor_circuit_state: 0 closed, 1 half-open, 2 open), so
// that an open circuit turning half-open shows without waiting for a call.
type circuitCollector struct {
	desc       *prometheus.Desc
	processors []*processor
}

func newCircuitCollector(ps []*processor) *circuitCollector {
	return &circuitCollector{
		desc: prometheus.NewDesc("atomicrides_processor_circuit_state",
			"State of each payment processor's circuit breaker: 0 closed, 1 half-open (real traffic tries it), 2 open (new bookings go elsewhere; its own requests wait with 503).",
			[]string{"processor"}, nil),
		processors: ps,
	}
}

// Describe implements prometheus.Collector.
func (c *circuitCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *circuitCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.processors {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, p.circuitState(), p.name)
	}
}
