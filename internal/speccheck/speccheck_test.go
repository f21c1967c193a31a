package speccheck_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/speccheck"
)

// TestCommittedSpec: the committed spec passes every check.
func TestCommittedSpec(t *testing.T) {
	t.Parallel()
	spec, err := os.ReadFile("../../openapi/openapi.yaml")
	require.NoError(t, err)
	require.NoError(t, speccheck.Check(t.Context(), spec))
}

const good = `openapi: 3.1.0
info: {title: t, version: "1"}
paths:
  /things/{id}:
    get:
      operationId: thing
      parameters:
        - name: id
          in: path
          required: true
          schema: {type: integer, examples: [7]}
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema: {$ref: "#/components/schemas/Thing"}
              examples:
                one: {value: {status: none, extra: null}}
components:
  schemas:
    Thing:
      type: object
      additionalProperties: false
      required: [status]
      properties:
        status: {type: string, enum: [none, done], examples: [none]}
        extra: {type: [string, "null"], enum: [a, b, null]}
`

// TestCheckFindsEachFault: a document with each fault the check exists for
// fails it, naming the fault; the same document without it passes.
func TestCheckFindsEachFault(t *testing.T) {
	t.Parallel()
	require.NoError(t, speccheck.Check(t.Context(), []byte(good)))
	for name, tc := range map[string]struct{ from, to, want string }{
		"answer example off its enum":  {"{status: none, extra: null}", `{status: "", extra: null}`, "status"},
		"schema example off its enum":  {"examples: [none]", `examples: [""]`, "examples"},
		"parameter example off schema": {"examples: [7]", `examples: ["seven"]`, "parameter id"},
		"null outside a nullable enum": {"enum: [a, b, null]", "enum: [a, b]", "extra"},
		"a keyword of no standard":     {"{type: integer, examples: [7]}", "{type: integer, examples: [7], patternDescription: x}", "patternDescription"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bad := strings.Replace(good, tc.from, tc.to, 1)
			require.NotEqual(t, good, bad)
			err := speccheck.Check(t.Context(), []byte(bad))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}
