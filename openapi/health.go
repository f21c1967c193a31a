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
		Tags:        []string{"operations"},
	}, func(ctx context.Context, _ *struct{}) (*healthOutput, error) {
		return &healthOutput{Body: HealthResponse{Status: "ok"}}, nil
	})

	op := huma.Operation{
		OperationID: "readyz",
		Method:      http.MethodGet,
		Path:        "/readyz",
		Summary:     "Readiness: the database is reachable and fully migrated",
		Tags:        []string{"operations"},
	}
	h.errorResponses(&op, 503)
	op.Responses["503"].Description = "Not ready: the database is unreachable or migrations are pending."
	op.Responses["503"].Headers = nil
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

func itoa(i int) string { return strconv.Itoa(i) }
