package pgenv

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFindBinaries(t *testing.T) {
	t.Parallel()
	dir, err := FindBinaries()
	require.NoError(t, err, "PostgreSQL's server programs must be installed for these tests (apt-get install postgresql)")
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		require.NotZero(t, fi.Mode().Perm()&0o111, "%s is not executable", name)
	}
	major, err := serverMajor(dir)
	require.NoError(t, err)
	require.Regexp(t, `^\d+(\.\d+)?$`, major)
}

func TestVersionOrder(t *testing.T) {
	t.Parallel()
	require.Equal(t, []int{15}, versionOf("/usr/lib/postgresql/15/bin"))
	require.Equal(t, []int{9, 6}, versionOf("/usr/pgsql-9.6/bin"))
	require.Equal(t, []int{17}, versionOf("/opt/homebrew/opt/postgresql@17/bin"))
	require.True(t, versionLess([]int{9, 6}, []int{10}))
	require.True(t, versionLess([]int{15}, []int{16}))
	require.False(t, versionLess([]int{16}, []int{16}))
}

func TestFindBinariesMissing(t *testing.T) {
	// Not parallel: it swaps the search locations (see noBinaries).
	noBinaries(t)
	_, err := FindBinaries()
	require.ErrorIs(t, err, ErrNoBinaries)
}

// noBinaries hides the installed server programs for the rest of a
// sequential test.
func noBinaries(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	saved := binDirGlobs
	binDirGlobs = []string{filepath.Join(t.TempDir(), "*", "bin")}
	t.Cleanup(func() { binDirGlobs = saved })
}
