package openapi

import (
	"context"
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"
)

// HealthResponse is the body of the health endpoints.
type HealthResponse struct {
	Status string `json:"status" example:"ok"`
}

type healthOutput struct {
	Body HealthResponse
}

func (h *handlers) registerHealth(ready func(context.Context) error) {
	huma.Register(h.api, huma.Operation{
		OperationID: "healthz",
		Method:      http.MethodGet,
		Path:        "/healthz",
		Summary:     "Liveness: the process serves HTTP",
		Description: "Answers 200 as long as the process serves HTTP, without touching the database. Read-only: safe to call and retry at any time.",
		Tags:        []string{"operations"},
		Responses:   map[string]*huma.Response{"200": healthOK()},
	}, func(ctx context.Context, _ *struct{}) (*healthOutput, error) {
		return &healthOutput{Body: HealthResponse{Status: "ok"}}, nil
	})

	op := huma.Operation{
		OperationID: "readyz",
		Method:      http.MethodGet,
		Path:        "/readyz",
		Summary:     "Readiness: the database is reachable and fully migrated",
		Description: "Answers 200 when the instance can serve requests (database reachable, migrations applied), 503 otherwise. Read-only: safe to call and retry at any time.",
		Tags:        []string{"operations"},
		Responses:   map[string]*huma.Response{"200": healthOK()},
	}
	h.errorResponses(&op, 503)
	op.Responses["503"].Description = "Not ready: the database is unreachable or migrations are pending."
	op.Responses["503"].Headers = nil
	withExamples(&op, "503", map[string]*huma.Example{"not-ready": example("The database is unreachable",
		problem(503, "", "not ready: failed to connect to the database"))})
	huma.Register(h.api, op, func(ctx context.Context, _ *struct{}) (*healthOutput, error) {
		if ready != nil {
			if err := ready(ctx); err != nil {
				h.logger.WarnContext(ctx, "not ready", "err", err)
				return nil, huma.Error503ServiceUnavailable("not ready: " + err.Error())
			}
		}
		return &healthOutput{Body: HealthResponse{Status: "ok"}}, nil
	})
}

// healthOK documents the 200 of the health endpoints.
func healthOK() *huma.Response {
	return &huma.Response{Description: "OK", Content: map[string]*huma.MediaType{"application/json": {
		Examples: map[string]*huma.Example{"ok": example("Serving", HealthResponse{Status: "ok"})},
	}}}
}

func itoa(i int) string { return strconv.Itoa(i) }
