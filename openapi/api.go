// Package openapi is the HTTP adapter of the service: Huma registration, the
// authentication of riders and operators, the table from domain error codes
// to HTTP statuses, and the OpenAPI spec generated from all of it (committed
// as openapi.yaml; the Go client in openapi/client is generated from it).
// Other routes outside the spec (the riders' booking pages, package
// openapi/web) are mounted on the same handler through Config.Pages.
package openapi

import (
	"context"
	"log/slog"
	"net/http"
	"reflect"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/atomicrides/atomicrides/internal/limits"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
)

// Config configures the HTTP handler.
type Config struct {
	// Service serves every operation but the accounts'. Only Spec may
	// leave it nil.
	Service *service.Service
	// Accounts serves the riders, their API keys, and authentication. Only
	// Spec may leave it nil.
	Accounts *accounts.Service
	// AdminToken is the operator credential: Bearer on the admin operations,
	// the password of HTTP Basic on River UI.
	AdminToken string
	// DispatchToken is the dispatch side's credential: Bearer on the
	// completion and cancellation of trips. Empty: no request is the
	// dispatch side's.
	DispatchToken string
	// RiverUI, when set, is served under /riverui/ to operators only, and
	// only to same-origin requests; its API takes JSON only.
	RiverUI http.Handler
	// Ready reports whether the service can serve (database reachable,
	// migrations applied); nil means always ready.
	Ready func(ctx context.Context) error
	// Logger receives access logs and internal errors.
	Logger *slog.Logger
	// Metrics, when set, receives the HTTP metrics and is served at /metrics
	// to operators.
	Metrics *prometheus.Registry
	// Pages, when set, registers routes outside the API (the booking pages)
	// on the handler's mux, behind the same request ids, access logs,
	// metrics and problem+json answers to unknown routes.
	Pages Routes
	// TracerProvider receives a span per request, continuing the client's
	// traceparent. Default the global provider (a no-op unless set).
	TracerProvider trace.TracerProvider
	// Limits is the admission control: rate limits, failed-authentication
	// limits and the admission limit. The zero Limits limits nothing.
	Limits Limits
}

// Routes is a set of HTTP handlers that registers itself on a mux.
type Routes interface {
	Register(mux *http.ServeMux)
}

// maxBodyBytes caps request bodies; the API's bodies are tiny.
const maxBodyBytes = 16 << 10

// Security scheme names in the spec.
const (
	schemeRider = "riderKey"
	schemeAdmin = "adminToken"
)

// NewHandler returns the service's HTTP handler.
func NewHandler(cfg Config) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	mux := http.NewServeMux()
	registerDocs(mux)
	api := register(mux, cfg)
	guard := authGuard{lim: &cfg.Limits}
	if cfg.Pages != nil {
		cfg.Pages.Register(mux)
	}
	if cfg.RiverUI != nil {
		mux.Handle(riverUIPrefix, requireAdminBasic(cfg.AdminToken, guard, guardRiverUI(cfg.RiverUI)))
	}
	var hm *httpMetrics
	if cfg.Metrics != nil {
		hm = newHTTPMetrics(cfg.Metrics)
		mux.Handle("GET /metrics", metricsHandler(cfg.AdminToken, guard, cfg.Metrics))
	}
	var h http.Handler = unmatched(mux)
	if cfg.Service != nil {
		h = paymentDeadlines(mux, cfg.Service.Lease(), h)
	}
	h = admit(mux, cfg.Limits, authenticatedRoutes(api), h)
	return traceRequests(cfg.TracerProvider, requestContext(cfg.Logger, hm, routeSpan(h)))
}

// Spec returns the OpenAPI document of the API as YAML.
func Spec() ([]byte, error) {
	api := register(http.NewServeMux(), Config{Logger: slog.Default()})
	return api.OpenAPI().YAML()
}

func register(mux *http.ServeMux, cfg Config) huma.API {
	config := huma.DefaultConfig("Atomic Rides", "1.0.0")
	config.Info.Description = "Books rides and charges riders exactly once, however often a request is retried. " +
		"Multi-step requests take an Idempotency-Key; a finished request is replayed byte for byte with " +
		"`Idempotent-Replayed: true`."
	config.CreateHooks = nil // no $schema property, no Link header
	config.DocsPath = ""     // Huma's page loads from a CDN; /docs is ours (docs.go)
	config.OpenAPIPath = "/openapi"
	config.Formats = jsonFormatsWithSelfDecoding(config.Formats)
	config.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		schemeRider:    {Type: "http", Scheme: "bearer", Description: "A rider's API key, as minted by PUT /users/{email}."},
		schemeAdmin:    {Type: "http", Scheme: "bearer", Description: "The operator credential (ADMIN_TOKEN)."},
		schemeDispatch: {Type: "http", Scheme: "bearer", Description: "The dispatch side's credential (DISPATCH_TOKEN): it completes and cancels trips, and nothing else."},
	}
	api := humago.New(mux, config)
	h := &handlers{svc: cfg.Service, acc: cfg.Accounts, api: api, logger: cfg.Logger, adminToken: cfg.AdminToken, dispatchToken: cfg.DispatchToken,
		limits: &cfg.Limits, guard: authGuard{lim: &cfg.Limits}}
	api.UseMiddleware(h.requireContentType)
	h.registerUsers()
	h.registerRides()
	h.registerRefunds()
	h.registerTrips()
	h.registerWebhooks()
	h.registerAdyenWebhooks()
	h.registerHealth(cfg.Ready)
	h.edgeResponses()
	nullableRefs(api.OpenAPI().Components.Schemas, "RideNextAction")
	finishExamples(api.OpenAPI())
	strictSpec(api.OpenAPI())
	return api
}

type handlers struct {
	svc        *service.Service
	acc        *accounts.Service
	api        huma.API
	logger     *slog.Logger
	adminToken string
	// dispatchToken is DISPATCH_TOKEN.
	dispatchToken string
	limits        *Limits
	guard         authGuard
}

// fail logs what the client will not see and translates err.
func (h *handlers) fail(ctx context.Context, op string, err error) error {
	switch service.ErrorCode(err) {
	case service.CodeInternal, service.CodeProcessorUnavailable:
		h.logger.ErrorContext(ctx, op, "request_id", RequestID(ctx), "err", err)
	}
	return toHTTP(err)
}

// errorResponses documents error statuses with the problem+json schema, and
// Retry-After where a retry is expected.
func (h *handlers) errorResponses(op *huma.Operation, codes ...int) {
	if op.Responses == nil {
		op.Responses = map[string]*huma.Response{}
	}
	errType := reflect.TypeOf(huma.ErrorModel{})
	schema := h.api.OpenAPI().Components.Schemas.Schema(errType, true, "ErrorModel")
	for _, code := range codes {
		resp := &huma.Response{
			Description: describeStatus(code),
			Content:     map[string]*huma.MediaType{"application/problem+json": {Schema: schema}},
		}
		switch code {
		case http.StatusConflict, http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusTooManyRequests:
			resp.Headers = map[string]*huma.Param{"Retry-After": {
				Description: "Seconds to wait before retrying with the same idempotency key.",
				Schema:      &huma.Schema{Type: "integer"},
			}}
		}
		if code == http.StatusTooManyRequests {
			resp.Headers["RateLimit-Policy"] = &huma.Param{
				Description: `The rider's budget of this kind of request (draft-ietf-httpapi-ratelimit-headers), e.g. "writes";q=50;w=10: 50 requests per 10 seconds. Absent on a refusal for failed authentications.`,
				Schema:      &huma.Schema{Type: "string"},
			}
			resp.Headers["RateLimit"] = &huma.Param{
				Description: `What is left of the budget, e.g. "writes";r=0;t=10: 0 requests left, full again in 10 seconds. Absent on a refusal for failed authentications.`,
				Schema:      &huma.Schema{Type: "string"},
			}
		}
		resp.Content["application/problem+json"].Examples = problemExamples[code]
		op.Responses[itoa(code)] = resp
	}
}

// edgeResponses documents, on every operation, the answers of what stands
// before it: the admission control's 503 on every route it does not exempt,
// and on every authenticated one the 401 of a missing credential and the
// 429 of the failed-authentication guard (and of the riders' budgets). An
// operation that documents one of them already keeps its own.
func (h *handlers) edgeResponses() {
	for path, item := range h.api.OpenAPI().Paths {
		for method, op := range map[string]*huma.Operation{
			http.MethodGet: item.Get, http.MethodPut: item.Put, http.MethodPost: item.Post,
			http.MethodDelete: item.Delete, http.MethodPatch: item.Patch,
		} {
			if op == nil {
				continue
			}
			var codes []int
			if routeClass(method+" "+path) != limits.Exempt {
				codes = append(codes, http.StatusServiceUnavailable)
			}
			if len(op.Security) > 0 {
				codes = append(codes, http.StatusUnauthorized, http.StatusTooManyRequests)
			}
			for _, code := range codes {
				if op.Responses[itoa(code)] == nil {
					h.errorResponses(op, code)
				}
			}
		}
	}
}

var statusDescriptions = map[int]string{
	http.StatusBadRequest:            "Malformed request: a missing or invalid header, or a body that is not JSON.",
	http.StatusUnauthorized:          "Missing or invalid credentials.",
	http.StatusPaymentRequired:       "The card was declined, or the processor rejected the charge; ride_id names the ride the booking created (declined). Stored: replayed for every retry with the same key.",
	http.StatusNotFound:              "No such resource for this caller.",
	http.StatusConflict:              "Another request with the same idempotency key is in progress.",
	http.StatusRequestEntityTooLarge: "The body is larger than 16 KiB.",
	http.StatusUnsupportedMediaType:  "The body is not declared as application/json (a missing Content-Type included).",
	http.StatusUnprocessableEntity:   "Invalid input (the errors name the field), or an idempotency key reused with a different request.",
	http.StatusInternalServerError:   "Internal error. Not stored: retry with the same idempotency key.",
	http.StatusTooManyRequests:       "The caller's own budget is spent, whatever other clients do: its writes or reads, its requests in flight at once, or the failed authentications of its address. Nothing was done and the idempotency key is unused: retry after Retry-After (or the RateLimit field's reset).",
	http.StatusServiceUnavailable:    "The payment processor gave no definitive answer, or the service as a whole is at its capacity (/problems/overloaded: never one client's doing). Not stored: retry with the same idempotency key after Retry-After, backing off.",
}

func describeStatus(code int) string {
	if d, ok := statusDescriptions[code]; ok {
		return d
	}
	return http.StatusText(code)
}
