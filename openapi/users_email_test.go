package openapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The rider's email must name a host: PUT /users/{email} refuses a domain
// label that starts or ends with a hyphen, is empty or longer than 63
// characters, or holds anything but letters, digits and hyphens, with a
// 422 naming path.email, and creates no rider.
func TestUserEmailDomainHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		email string
		ok    bool
	}{
		{"x@a-b.com", true},
		{"x@xn--bcher-kva.example", true},
		{"x@" + strings.Repeat("a", 63) + ".com", true},
		{"x@-y.com", false},
		{"x@y-.com", false},
		{"x@y..com", false},
		{"x@.y.com", false},
		{"x@y.com.", false},
		{"x@y_z.com", false},
		{"x@y!z.com", false},
		{"x@" + strings.Repeat("a", 64) + ".com", false},
	} {
		t.Run(c.email, func(t *testing.T) {
			t.Parallel()
			r := b.do(t, http.MethodPut, "/users/"+c.email, admin(), "")
			if c.ok {
				require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
				return
			}
			require.Equal(t, []string{"path.email"}, r.Problem(t, http.StatusUnprocessableEntity))
			require.Zero(t, b.Count(t, `SELECT count(*) FROM users WHERE email = $1`, strings.ToLower(c.email)))
		})
	}
}
