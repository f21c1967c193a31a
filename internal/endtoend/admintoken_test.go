package endtoend

import (
	"github.com/atomicrides/atomicrides/internal/binrun"

	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAdminTokenStaysSecret: a supplied admin token appears nowhere in the
// process's output, only its fingerprint; a generated one is printed in the
// banner (the only way to learn it) and never in a log line; a supplied
// token that is too short is refused at start without being echoed.
func TestAdminTokenStaysSecret(t *testing.T) {
	t.Parallel()

	t.Run("supplied", func(t *testing.T) {
		t.Parallel()
		s := serveBinary(t)
		s.rider(t, "token@example.com")
		s.stop(t)
		out := s.logs.String()
		require.NotContains(t, out, s.adminToken)
		require.Contains(t, out, `curl -s -X PUT -H "Authorization: Bearer $ADMIN_TOKEN"`)
		require.Contains(t, out, "admin_token_sha256="+tokenFingerprint(s.adminToken))
	})

	t.Run("generated", func(t *testing.T) {
		t.Parallel()
		s := serveBinary(t, "ADMIN_TOKEN=")
		m := regexp.MustCompile(`admin token: ([0-9a-f]{48})  \(generated`).FindStringSubmatch(s.logs.String())
		require.NotNil(t, m, "the banner shows the generated token:\n%s", s.logs.String())
		s.adminToken = m[1]
		s.rider(t, "generated@example.com") // the printed token is the one in force
		s.stop(t)
		out := s.logs.String()
		require.Equal(t, 2, strings.Count(out, s.adminToken), "the banner's token line and its curl, nothing else")
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "time=") {
				require.NotContains(t, line, s.adminToken, "a log line")
			}
		}
		require.Contains(t, out, "admin_token_sha256="+tokenFingerprint(s.adminToken))
	})

	t.Run("too short", func(t *testing.T) {
		t.Parallel()
		const short = "only-twenty-chars-xx"
		r := binrun.RunT(t, []string{"ADMIN_TOKEN=" + short, "DATABASE_URL=postgres://127.0.0.1:1/none"}, "serve", "-dev")
		require.NotZero(t, r.ExitCode)
		require.Empty(t, r.Stdout)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(r.Stderr), "\n")+1, "one line: %q", r.Stderr)
		require.Contains(t, r.Stderr, "ADMIN_TOKEN")
		require.Contains(t, r.Stderr, "at least 32")
		require.NotContains(t, r.Stderr, short)
	})
}

// tokenFingerprint is the admin_token_sha256 that serve logs: the first four
// bytes of the token's SHA-256, in hex.
func tokenFingerprint(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:4])
}
