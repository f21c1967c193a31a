package pgenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// ErrNoBinaries reports that no directory holds all of PostgreSQL's server
// programs (initdb, pg_ctl and postgres), so no throwaway cluster can start.
var ErrNoBinaries = errors.New("pgenv: PostgreSQL server binaries (initdb, pg_ctl, postgres) not found")

// serverPrograms must all sit in one directory for a cluster to be started
// from it: pg_ctl looks for postgres beside itself.
var serverPrograms = []string{"initdb", "pg_ctl", "postgres"}

// binDirGlobs are the well-known install locations searched after PATH
// (Debian/Ubuntu, RHEL's PGDG packages, Homebrew); within each, the highest
// version wins.
var binDirGlobs = []string{
	"/usr/lib/postgresql/*/bin",
	"/usr/pgsql-*/bin",
	"/opt/homebrew/opt/postgresql@*/bin",
	"/usr/local/opt/postgresql@*/bin",
}

// FindBinaries returns the directory holding PostgreSQL's server programs
// (initdb, pg_ctl and postgres): the one of initdb on PATH if all three are
// there (following a symlink to its real directory), else the highest version
// in the well-known install locations such as /usr/lib/postgresql/*/bin.
// It returns an error wrapping ErrNoBinaries when there is none.
func FindBinaries() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && hasServerPrograms(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
		if hasServerPrograms(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	for _, pattern := range binDirGlobs {
		dirs, _ := filepath.Glob(pattern) // the patterns are constant and valid
		sort.SliceStable(dirs, func(i, j int) bool {
			return versionLess(versionOf(dirs[j]), versionOf(dirs[i]))
		})
		for _, dir := range dirs {
			if hasServerPrograms(dir) {
				return dir, nil
			}
		}
	}
	return "", fmt.Errorf("%w on PATH or in %s", ErrNoBinaries, strings.Join(binDirGlobs, ", "))
}

func hasServerPrograms(dir string) bool {
	for _, name := range serverPrograms {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

var versionRe = regexp.MustCompile(`\d+(?:\.\d+)*`)

// versionOf returns the numeric components of the last version-looking run
// of digits in path ("/usr/lib/postgresql/15/bin" → [15]).
func versionOf(path string) []int {
	all := versionRe.FindAllString(path, -1)
	if len(all) == 0 {
		return nil
	}
	var v []int
	for _, part := range strings.Split(all[len(all)-1], ".") {
		n, _ := strconv.Atoi(part) // digits only, by the regexp
		v = append(v, n)
	}
	return v
}

func versionLess(a, b []int) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

// serverMajor returns the major version of the postgres program in binDir in
// the form PostgreSQL writes to PG_VERSION ("15", or "9.6" before 10).
func serverMajor(binDir string) (string, error) {
	out, err := exec.Command(filepath.Join(binDir, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("pgenv: %s --version: %w", filepath.Join(binDir, "postgres"), err)
	}
	// "postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)"
	s := string(out)
	if i := strings.Index(s, ")"); i >= 0 {
		s = s[i+1:]
	}
	v := versionRe.FindString(s)
	if v == "" {
		return "", fmt.Errorf("pgenv: cannot read a version in %q", strings.TrimSpace(string(out)))
	}
	parts := strings.Split(v, ".")
	if parts[0] == "9" && len(parts) > 1 {
		return parts[0] + "." + parts[1], nil
	}
	return parts[0], nil
}
