package openapi_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/openapi"
)

// specJSON is the spec as the handler serves it at /openapi.json.
func specJSON(t *testing.T) map[string]any {
	t.Helper()
	rec := httptest.NewRecorder()
	openapi.NewHandler(openapi.Config{Logger: slog.New(slog.DiscardHandler)}).
		ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	var spec map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &spec))
	return spec
}

// hasExamples reports whether a media type or parameter carries an example.
func hasExamples(m map[string]any) bool {
	if m["example"] != nil {
		return true
	}
	ex, _ := m["examples"].(map[string]any)
	return len(ex) > 0
}

// The spec is the integrators' manual: every operation has a summary, a
// description that states how it may be retried, an example of every
// parameter and request body, and an example of every response body.
func TestSpecDocumentsEveryOperation(t *testing.T) {
	t.Parallel()
	paths := specJSON(t)["paths"].(map[string]any)
	ops := 0
	for path, item := range paths {
		for method, v := range item.(map[string]any) {
			op := v.(map[string]any)
			name := strings.ToUpper(method) + " " + path
			ops++
			require.NotEmpty(t, op["summary"], "%s: summary", name)
			desc, _ := op["description"].(string)
			require.NotEmpty(t, desc, "%s: description", name)
			lower := strings.ToLower(desc)
			require.True(t, strings.Contains(lower, "idempoten") || strings.Contains(lower, "retry"),
				"%s: the description states the idempotency contract: %q", name, desc)

			params, _ := op["parameters"].([]any)
			for _, p := range params {
				p := p.(map[string]any)
				require.True(t, hasExamples(p), "%s: parameter %s has an example", name, p["name"])
			}
			if rb, ok := op["requestBody"].(map[string]any); ok {
				for ct, mt := range rb["content"].(map[string]any) {
					require.True(t, hasExamples(mt.(map[string]any)), "%s: request body %s has an example", name, ct)
				}
			}
			responses := op["responses"].(map[string]any)
			require.NotEmpty(t, responses, name)
			for status, r := range responses {
				if status == "204" {
					continue // No Content: nothing to show
				}
				content, _ := r.(map[string]any)["content"].(map[string]any)
				require.NotEmpty(t, content, "%s %s: response has a body", name, status)
				for ct, mt := range content {
					require.True(t, hasExamples(mt.(map[string]any)), "%s %s: response %s has an example", name, status, ct)
				}
			}
		}
	}
	require.Equal(t, 16, ops, "every operation was checked")
}
