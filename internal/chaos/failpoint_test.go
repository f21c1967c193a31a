package chaos

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
	"github.com/atomicrides/atomicrides/internal/failpoint"
)

// TestProductionBinaryCarriesNoFailpoints builds the command as it ships (no
// build tags) and finds none of the failpoint machinery in it: no code of
// package failpoint, not the variable that arms failpoints, no failpoint
// name. The same search in a build with -tags failpoints finds all of them,
// so the search can tell.
func TestProductionBinaryCarriesNoFailpoints(t *testing.T) {
	t.Parallel()
	require.False(t, failpoint.Enabled, "tests build without the failpoints tag")
	for _, build := range []struct {
		tags []string
		has  bool
	}{
		{tags: nil, has: false},
		{tags: []string{"failpoints"}, has: true},
	} {
		b, err := os.ReadFile(binrun.Build(t, build.tags...))
		require.NoError(t, err)
		for _, s := range []string{
			"atomicrides/internal/failpoint", // its package path, in symbols and line tables
			failpoint.EnvVar,
			"failpoint %s: crash",
			"before_commit", "after_commit", "after_call",
		} {
			require.Equal(t, build.has, bytes.Contains(b, []byte(s)), "build -tags %q: contains %q", build.tags, s)
		}
	}
}
