package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/service/failpoint"
)

// TestProductionBinaryCarriesNoFailpoints builds the command as it ships (no
// build tags) and finds none of the failpoint machinery in it: no code of
// package failpoint, not the variable that arms failpoints, no failpoint
// name. The same search in a build with -tags failpoints finds all of them,
// so the search can tell.
func TestProductionBinaryCarriesNoFailpoints(t *testing.T) {
	t.Parallel()
	require.False(t, failpoint.Enabled, "tests build without the failpoints tag")
	dir := t.TempDir()
	for _, build := range []struct {
		tags string
		has  bool
	}{
		{tags: "", has: false},
		{tags: "failpoints", has: true},
	} {
		bin := filepath.Join(dir, "atomicrides-"+build.tags)
		out, err := exec.Command("go", "build", "-tags", build.tags, "-o", bin, ".").CombinedOutput()
		require.NoError(t, err, "go build -tags %q: %s", build.tags, out)
		b, err := os.ReadFile(bin)
		require.NoError(t, err)
		for _, s := range []string{
			"atomicrides/service/failpoint", // its package path, in symbols and line tables
			failpoint.EnvVar,
			"failpoint %s: crash",
			"before_commit", "after_commit", "after_call",
		} {
			require.Equal(t, build.has, bytes.Contains(b, []byte(s)), "build -tags %q: contains %q", build.tags, s)
		}
	}
}
