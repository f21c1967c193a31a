package openapi

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/service"
)

// TestEveryCodeHasAStatus fails when the domain gains a code that the
// HTTP table does not translate, or the table keeps a code the domain no
// longer has.
func TestEveryCodeHasAStatus(t *testing.T) {
	t.Parallel()
	codes := service.Codes()
	for _, code := range codes {
		he, ok := httpErrors[code]
		require.True(t, ok, "service code %q has no HTTP status", code)
		require.GreaterOrEqual(t, he.status, 400, "code %q", code)
		require.NotEmpty(t, http.StatusText(he.status), "code %q", code)
	}
	require.Len(t, httpErrors, len(codes), "the table translates codes the service does not list")
}

// TestToHTTPWrapped translates a wrapped domain error as the error itself.
func TestToHTTPWrapped(t *testing.T) {
	t.Parallel()
	domain := &service.Error{Code: service.CodeKeyInUse, Message: "busy", RetryAfter: 1500 * time.Millisecond}
	err := toHTTP(fmt.Errorf("ride create: %w", domain))

	var se huma.StatusError
	require.True(t, errors.As(err, &se))
	require.Equal(t, http.StatusConflict, se.GetStatus())
	var hh huma.HeadersError
	require.True(t, errors.As(err, &hh))
	require.Equal(t, "2", hh.GetHeaders().Get("Retry-After"))
	var em *huma.ErrorModel
	require.True(t, errors.As(err, &em))
	require.Equal(t, ProblemKeyInUse, em.Type)
	require.Equal(t, "busy", em.Detail)

	require.True(t, errors.As(toHTTP(errors.New("boom")), &se))
	require.Equal(t, http.StatusInternalServerError, se.GetStatus())
}
