package openapi_test

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/service"
)

// paramSchemas returns the schema of every parameter named name in the
// spec, by operation.
func paramSchemas(t *testing.T, spec map[string]any, name string) map[string]map[string]any {
	t.Helper()
	found := map[string]map[string]any{}
	for path, item := range spec["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			params, _ := op.(map[string]any)["parameters"].([]any)
			for _, p := range params {
				pm := p.(map[string]any)
				if pm["name"] == name {
					found[strings.ToUpper(method)+" "+path] = pm["schema"].(map[string]any)
				}
			}
		}
	}
	return found
}

// accepts is what a spec-driven client checks of a string: the schema's
// lengths (in characters) and pattern.
func accepts(schema map[string]any, re *regexp.Regexp, s string) bool {
	n := float64(utf8.RuneCountInString(s))
	return n >= schema["minLength"].(float64) && n <= schema["maxLength"].(float64) && re.MatchString(s)
}

// randomString draws strings of the alphabet's bytes with lengths around
// the rules' bounds.
func randomString(r *rand.Rand, alphabet string, lengths []int) string {
	n := lengths[r.IntN(len(lengths))] + r.IntN(3) - 1
	var b strings.Builder
	for range max(n, 0) {
		b.WriteByte(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()
}

// The spec states the rules the service enforces, so that a client
// generated from it checks what the service checks: a string the schema
// of the Idempotency-Key header accepts is exactly one the service takes
// (ParseIdempotencyKey), bare or quoted, and likewise for the rider's
// email in the path (NormalizeEmail).
func TestSpecStatesTheServiceRules(t *testing.T) {
	t.Parallel()
	spec := specJSON(t)
	r := rand.New(rand.NewPCG(26, 8))

	keys := paramSchemas(t, spec, "Idempotency-Key")
	require.Len(t, keys, 5, "POST /rides, and /rides/{id}/refund, /complete, /cancel and /balance")
	for op, schema := range keys {
		re := regexp.MustCompile(schema["pattern"].(string))
		corpus := []string{
			strings.Repeat("k", 20), strings.Repeat("k", 19), strings.Repeat("k", 255), strings.Repeat("k", 256),
			`"` + strings.Repeat("k", 20) + `"`, `"` + strings.Repeat("k", 19) + `"`,
			`"` + strings.Repeat(`\"`, 255) + `"`, `"` + strings.Repeat(`\\`, 256) + `"`,
			`"` + strings.Repeat("k", 20), "k" + strings.Repeat(`"`, 20), strings.Repeat("k", 10) + " " + strings.Repeat("k", 10),
			strings.Repeat("k", 20) + "\x7f", strings.Repeat("é", 20), `"` + strings.Repeat("k", 20) + `\k"`,
		}
		for range 200_000 {
			s := randomString(r, "ab\"\\ ~!#[]\x7f\x01", []int{18, 20, 22, 40, 255, 257})
			if r.IntN(2) == 0 {
				s = `"` + s + `"`
			}
			corpus = append(corpus, s)
		}
		for _, s := range corpus {
			_, err := service.ParseIdempotencyKey(s)
			require.Equal(t, err == nil, accepts(schema, re, s), "%s: Idempotency-Key %q: service accepts %v", op, s, err == nil)
		}
	}

	emails := paramSchemas(t, spec, "email")
	require.Len(t, emails, 5, "every operation on /users/{email}")
	for op, schema := range emails {
		require.Equal(t, "email", schema["format"], op)
		re := regexp.MustCompile(schema["pattern"].(string))
		corpus := []string{
			"rider@example.com", "Rider@Example.COM", "a@b", "a.b@c.d", ".a@b.c", "a.@b.c", "a..b@c.d", "a@b..c",
			"a@[127.0.0.1]", `"a b"@c.d`, "a b@c.d", "a@b@c", "ab", "a\x00@b.c", "é@b.c", "<a@b.c>", "a@b.c (x)",
			strings.Repeat("a", 243) + "@example.com", strings.Repeat("a", 244) + "@example.com",
			"x@-y.com", "x@y-.com", "x@y..com", "x@a-b.com", "x@a--b.com", "x@y_z.com", "x@y!z.com", "x@xn--bcher-kva.example",
			"x@" + strings.Repeat("a", 63) + ".com", "x@" + strings.Repeat("a", 64) + ".com", "x@" + strings.Repeat("a", 63),
		}
		for range 200_000 {
			corpus = append(corpus, randomString(r, "ab.@\"\\[]() <>,;:\t!#`~-\x7f", []int{3, 6, 10}))
		}
		// Domains around the host-name rules: hyphens, dots and other
		// characters at either end of labels around 63 characters.
		for range 50_000 {
			corpus = append(corpus, "x@"+randomString(r, "aaaa1-._!", []int{1, 3, 62, 64, 66}))
		}
		for _, s := range corpus {
			_, err := service.NormalizeEmail(s)
			require.Equal(t, err == nil, accepts(schema, re, s), "%s: email %q: service accepts %v", op, s, err == nil)
		}
	}
}
