package telemetry_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/fake/mailsink"
	"github.com/atomicrides/atomicrides/internal/telemetry"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/jobs"
	"github.com/atomicrides/atomicrides/openapi"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/payments"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

const adminToken = "test-admin-token"

// treeBundle is the whole service wired as serve wires it, every part
// tracing into one span recorder: the HTTP handler, the service over a pool
// with the pgx tracer, the real Stripe adapter against the fake Stripe, the
// SMTP mailer against a mail sink, and a River client running every worker
// with the tracing middleware.
type treeBundle struct {
	url    string
	spans  *tracetest.SpanRecorder
	fake   *fakestripe.Server
	sink   *mailsink.Sink
	events <-chan *river.Event
}

func setupTree(t *testing.T) *treeBundle {
	t.Helper()
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	cfg, err := pgxpool.ParseConfig(dbtest.NewURL(t))
	require.NoError(t, err)
	cfg.MaxConns = dbtest.DefaultMaxConns
	cfg.ConnConfig.Tracer = telemetry.PgxTracer{}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	fake := testkit.NewStripe(t)

	sink, mailer := testkit.NewMail(t)

	svc, err := service.New(service.Config{
		Pool: pool,
		Payments: payments.New(payments.Config{
			APIBase: fake.URL, SecretKey: "sk_test_tree", MaxNetworkRetries: payments.NoRetries, Timeout: 5 * time.Second,
		}),
		TracerProvider: tp,
	})
	require.NoError(t, err)

	workers := river.NewWorkers()
	jobs.Register(workers, jobs.Parts{Service: svc, Settlements: testkit.NewSettlements(t, svc), Receipts: testkit.NewReceipts(t, svc, mailer, nil)})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		Workers:           workers,
		FetchPollInterval: 20 * time.Millisecond,
		FetchCooldown:     10 * time.Millisecond,
		Plugins:           []rivertype.Plugin{telemetry.NewRiverMiddleware(tp)},
	})
	require.NoError(t, err)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
	t.Cleanup(cancel)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { _ = client.Stop(context.Background()) })

	srv := httptest.NewServer(testkit.Conform(t, openapi.NewHandler(openapi.Config{
		Service: svc, Accounts: testkit.NewAccounts(t, svc, nil), AdminToken: adminToken, Logger: slog.New(slog.DiscardHandler), TracerProvider: tp,
	})))
	t.Cleanup(srv.Close)
	return &treeBundle{url: srv.URL, spans: rec, fake: fake.Server, sink: sink, events: events}
}

// do sends a request to the service and returns the answer's status and
// body; a non-empty body is sent as JSON.
func (b *treeBundle) do(t *testing.T, method, path string, headers map[string]string, body string) (int, []byte) {
	t.Helper()
	r := testkit.Do(t, method, b.url+path, headers, body)
	return r.Status, r.Body
}

// rider creates a rider paying with tok_visa, waits for the job that
// creates its Stripe customer, and returns its API key.
func (b *treeBundle) rider(t *testing.T, email string) string {
	t.Helper()
	status, body := b.do(t, http.MethodPut, "/users/"+email, map[string]string{"Authorization": "Bearer " + adminToken}, `{"payment_source":"tok_visa"}`)
	require.Equal(t, http.StatusCreated, status, string(body))
	var res struct {
		APIKey string `json:"api_key"`
	}
	require.NoError(t, json.Unmarshal(body, &res))
	require.NotEmpty(t, res.APIKey)
	b.waitJob(t, service.CustomerCreateArgs{}.Kind())
	return res.APIKey
}

// waitJob waits until a job of kind completes; any other end fails.
func (b *treeBundle) waitJob(t *testing.T, kind string) *rivertype.JobRow {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-b.events:
			if ev.Job.Kind != kind {
				continue
			}
			require.Equal(t, river.EventKindJobCompleted, ev.Kind, "job %s: %v", kind, ev.Job.Errors)
			return ev.Job
		case <-timeout:
			t.Fatalf("no %s job completed", kind)
		}
	}
}

func (b *treeBundle) book(t *testing.T, apiKey, idemKey string, headers map[string]string) (int, []byte) {
	t.Helper()
	h := map[string]string{"Authorization": "Bearer " + apiKey, "Idempotency-Key": idemKey}
	for k, v := range headers {
		h[k] = v
	}
	return b.do(t, http.MethodPost, "/rides", h,
		testkit.SomeRideJSON)
}

// spanSet is the ended spans, with lookups by name and parent.
type spanSet []sdktrace.ReadOnlySpan

func (s spanSet) named(name string) spanSet {
	var out spanSet
	for _, sp := range s {
		if sp.Name() == name {
			out = append(out, sp)
		}
	}
	return out
}

func (s spanSet) childrenOf(parent sdktrace.ReadOnlySpan) spanSet {
	var out spanSet
	for _, sp := range s {
		if sp.Parent().SpanID() == parent.SpanContext().SpanID() && sp.SpanContext().TraceID() == parent.SpanContext().TraceID() {
			out = append(out, sp)
		}
	}
	return out
}

// one returns the only span named name among s.
func (s spanSet) one(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	got := s.named(name)
	require.Len(t, got, 1, "spans named %q among %v", name, s.names())
	return got[0]
}

func (s spanSet) names() []string {
	out := make([]string, len(s))
	for i, sp := range s {
		out[i] = sp.Name()
	}
	return out
}

func attr(sp sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range sp.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func requireChild(t *testing.T, parent, child sdktrace.ReadOnlySpan) {
	t.Helper()
	require.Equal(t, parent.SpanContext().TraceID(), child.SpanContext().TraceID(), "%s and %s in one trace", parent.Name(), child.Name())
	require.Equal(t, parent.SpanContext().SpanID(), child.Parent().SpanID(), "%s is the parent of %s", parent.Name(), child.Name())
}

// requireBefore asserts that a ended before b started.
func requireBefore(t *testing.T, a, b sdktrace.ReadOnlySpan) {
	t.Helper()
	require.False(t, a.EndTime().After(b.StartTime()), "%s ends before %s starts", a.Name(), b.Name())
}

// requireReceiptTree asserts the receipt job under the charge phase and the
// SMTP send under the job, and returns the job's span.
func requireReceiptTree(t *testing.T, all spanSet, chargePhase sdktrace.ReadOnlySpan) {
	t.Helper()
	job := all.childrenOf(chargePhase).one(t, "job ride_receipt")
	require.Equal(t, trace.SpanKindConsumer, job.SpanKind())
	require.Equal(t, "ride_receipt", attr(job, "river.job.kind").AsString())
	smtp := all.childrenOf(job).one(t, "smtp send")
	require.Equal(t, trace.SpanKindClient, smtp.SpanKind())
	require.True(t, strings.HasPrefix(attr(smtp, "email.message.id").AsString(), "receipt.ride-"), "message id %q", attr(smtp, "email.message.id").AsString())
	// The job runs once the phase's COMMIT is visible, which may be before
	// the request has read the COMMIT's answer and ended the phase's span:
	// what is certain is that the phase began first.
	require.False(t, job.StartTime().Before(chargePhase.StartTime()), "%s starts after %s starts", job.Name(), chargePhase.Name())
}

func TestTraceOfABooking(t *testing.T) {
	t.Parallel()
	b := setupTree(t)
	key := b.rider(t, "tree@example.com")

	// The client's own trace: its traceparent is honoured.
	clientTrace := "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan := "00f067aa0ba902b7"
	status, body := b.book(t, key, "tree-booking-key-0000000001", map[string]string{
		"traceparent": "00-" + clientTrace + "-" + clientSpan + "-01",
	})
	require.Equal(t, http.StatusCreated, status, string(body))
	b.waitJob(t, service.RideReceiptArgs{}.Kind())
	require.Len(t, b.fake.Charges(), 1)

	all := spanSet(b.spans.Ended())
	var request sdktrace.ReadOnlySpan
	for _, sp := range all.named("POST /rides") {
		request = sp
	}
	require.NotNil(t, request, "spans: %v", all.names())
	require.Equal(t, clientTrace, request.SpanContext().TraceID().String())
	require.Equal(t, clientSpan, request.Parent().SpanID().String())
	require.True(t, request.Parent().IsRemote())
	require.Equal(t, trace.SpanKindServer, request.SpanKind())
	require.EqualValues(t, http.StatusCreated, attr(request, "http.response.status_code").AsInt64())
	require.Equal(t, "POST /rides", attr(request, "http.route").AsString())

	// request → claim phase (fused with the phase that creates the ride)
	// → Stripe charge → charge phase, in that order, all children of the
	// request.
	under := all.childrenOf(request)
	claim := under.one(t, "phase ride.create started")
	require.True(t, attr(claim, "atomicrides.phase.claim").AsBool())
	require.Equal(t, "ride.create", attr(claim, "atomicrides.flow").AsString())
	require.Equal(t, "ride_created", attr(claim, "atomicrides.phase.to").AsString())
	charge := under.one(t, "stripe charge_create")
	require.Equal(t, trace.SpanKindClient, charge.SpanKind())
	require.Equal(t, "ok", attr(charge, "stripe.outcome").AsString())
	require.EqualValues(t, 1, attr(charge, "stripe.attempts").AsInt64())
	attempt := all.childrenOf(charge).one(t, "stripe attempt")
	require.EqualValues(t, http.StatusOK, attr(attempt, "http.response.status_code").AsInt64())
	require.Equal(t, "/v1/payment_intents", attr(attempt, "url.path").AsString())
	chargePhase := under.one(t, "phase ride.create ride_created")
	require.False(t, attr(chargePhase, "atomicrides.phase.claim").AsBool())
	require.Equal(t, "finished", attr(chargePhase, "atomicrides.phase.to").AsString())
	require.EqualValues(t, http.StatusCreated, attr(chargePhase, "atomicrides.response.status").AsInt64())
	requireBefore(t, claim, charge)
	requireBefore(t, charge, chargePhase)

	// Each phase's statements are its children, named after their queries.
	claimQueries := all.childrenOf(claim)
	claimQueries.one(t, "db IdempotencyKeyInsert")
	require.NotEmpty(t, claimQueries.named("db commit"), "claim's statements: %v", claimQueries.names())
	all.childrenOf(chargePhase).one(t, "db IdempotencyKeyFence")

	// charge phase → receipt job (inserted in its transaction) → SMTP send.
	requireReceiptTree(t, all, chargePhase)
	require.Len(t, b.sink.Messages(), 1)
}

func TestTraceOfABookingRetriedAfterStripe503(t *testing.T) {
	t.Parallel()
	b := setupTree(t)
	key := b.rider(t, "retried@example.com")

	b.fake.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultStatus, Status: http.StatusServiceUnavailable, Times: 1})
	status, body := b.book(t, key, "tree-booking-key-0000000002", nil)
	require.Equal(t, http.StatusServiceUnavailable, status, string(body))
	status, body = b.book(t, key, "tree-booking-key-0000000002", nil)
	require.Equal(t, http.StatusCreated, status, string(body))
	b.waitJob(t, service.RideReceiptArgs{}.Kind())
	require.Len(t, b.fake.Charges(), 1)

	all := spanSet(b.spans.Ended())
	requests := all.named("POST /rides")
	require.Len(t, requests, 2)
	first, second := requests[0], requests[1]
	if first.StartTime().After(second.StartTime()) {
		first, second = second, first
	}
	require.NotEqual(t, first.SpanContext().TraceID(), second.SpanContext().TraceID())
	require.EqualValues(t, http.StatusServiceUnavailable, attr(first, "http.response.status_code").AsInt64())
	require.EqualValues(t, http.StatusCreated, attr(second, "http.response.status_code").AsInt64())

	// Two charge calls, one per request; only the second succeeded.
	charges := all.named("stripe charge_create")
	require.Len(t, charges, 2)
	var ok spanSet
	for _, c := range charges {
		if attr(c, "stripe.outcome").AsString() == "ok" {
			ok = append(ok, c)
		}
	}
	require.Len(t, ok, 1)

	// The first request: the claim phase reached ride_created, the charge
	// was unavailable (one 503 attempt), and no phase recorded anything more.
	firstUnder := all.childrenOf(first)
	require.Equal(t, "ride_created", attr(firstUnder.one(t, "phase ride.create started"), "atomicrides.phase.to").AsString())
	failed := firstUnder.one(t, "stripe charge_create")
	require.Equal(t, "unavailable", attr(failed, "stripe.outcome").AsString())
	require.EqualValues(t, http.StatusServiceUnavailable, attr(failed, "stripe.http.status_code").AsInt64())
	require.EqualValues(t, http.StatusServiceUnavailable, attr(all.childrenOf(failed).one(t, "stripe attempt"), "http.response.status_code").AsInt64())
	require.Empty(t, firstUnder.named("phase ride.create ride_created"))

	// The retry: a claim that runs no phase, the charge, the charge phase,
	// and the receipt under it.
	secondUnder := all.childrenOf(second)
	claim := secondUnder.one(t, "phase ride.create claim")
	require.True(t, attr(claim, "atomicrides.phase.claim").AsBool())
	require.Equal(t, ok[0].SpanContext(), secondUnder.one(t, "stripe charge_create").SpanContext())
	chargePhase := secondUnder.one(t, "phase ride.create ride_created")
	requireBefore(t, claim, ok[0])
	requireBefore(t, ok[0], chargePhase)
	requireReceiptTree(t, all, chargePhase)
}
