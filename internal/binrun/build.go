package binrun

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/atomicrides/atomicrides/internal/pgenv"
)

// builds holds one build of the binary per tag set, for the life of the test
// process.
var builds = struct {
	mu   sync.Mutex
	dir  string // holds every build; removed by Main
	bins map[string]*build
}{bins: map[string]*build{}}

type build struct {
	once sync.Once
	path string
	err  error
}

// Build returns the path of the project's binary built with tags (none: the
// binary as it ships). The build runs once per test process and tag set,
// whichever test asks first; later calls wait for it and share it. A test
// package that builds calls [Main] from its TestMain, which removes the
// builds when its tests end.
func Build(tb testing.TB, tags ...string) string {
	tb.Helper()
	path, err := BuildErr(tags...)
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// BuildErr is [Build] for callers without a test at hand: it returns the
// build's error instead of failing a test.
func BuildErr(tags ...string) (string, error) {
	key := strings.Join(tags, ",")
	builds.mu.Lock()
	b := builds.bins[key]
	if b == nil {
		b = &build{}
		builds.bins[key] = b
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "atomicrides-bin-")
		if err != nil {
			builds.mu.Unlock()
			return "", fmt.Errorf("binrun: build: %w", err)
		}
		builds.dir = dir
	}
	dir := builds.dir
	builds.mu.Unlock()

	b.once.Do(func() {
		name := "atomicrides"
		if key != "" {
			name += "-" + strings.ReplaceAll(key, ",", "-")
		}
		b.path = filepath.Join(dir, name)
		b.err = buildTo(b.path, tags...)
	})
	return b.path, b.err
}

// buildTo builds the project's binary with tags into path.
func buildTo(path string, tags ...string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-tags", strings.Join(tags, ","), "-o", path, ".")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("binrun: go build -tags %q: %w\n%s", strings.Join(tags, ","), err, out)
	}
	return nil
}

// ModuleRoot returns the directory of the project's go.mod, found from the
// working directory (go test runs a package's tests in its directory).
func ModuleRoot() (string, error) {
	root, err := pgenv.FindProjectRoot("")
	if err != nil {
		return "", fmt.Errorf("binrun: %w", err)
	}
	return root, nil
}

// Main runs the tests of m, removes the binaries [Build] made for them, and
// exits with the tests' status. Call it from TestMain:
//
//	func TestMain(m *testing.M) { binrun.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	builds.mu.Lock()
	dir := builds.dir
	builds.mu.Unlock()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	os.Exit(code)
}
