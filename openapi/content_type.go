package openapi

import (
	"net/http"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
)

// requireContentType refuses, with 415, a request to an operation that takes
// a body when it sends no Content-Type but a body, or no Content-Type to an
// operation whose body is required: a body is read only as what the client
// declares it to be, never guessed. A request with no body to an operation
// whose body is optional needs no Content-Type. Other content types than JSON
// are refused by Huma, with the same status.
func (h *handlers) requireContentType(ctx huma.Context, next func(huma.Context)) {
	rb := ctx.Operation().RequestBody
	if rb == nil || ctx.Header("Content-Type") != "" {
		next(ctx)
		return
	}
	r, _ := humago.Unwrap(ctx)
	if rb.Required || r.ContentLength != 0 {
		_ = huma.WriteErr(h.api, ctx, http.StatusUnsupportedMediaType,
			"a request body must be sent with Content-Type: application/json",
			&huma.ErrorDetail{Location: "header.Content-Type", Message: "required with a request body"})
		return
	}
	next(ctx)
}
