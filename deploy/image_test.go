package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// imageConfig is the part of `podman image inspect` the tests read.
type imageConfig struct {
	ID     string `json:"Id"`
	Os     string `json:"Os"`
	Config struct {
		User         string              `json:"User"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		Env          []string            `json:"Env"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
	} `json:"Config"`
	Healthcheck *struct {
		Test     []string      `json:"Test"`
		Interval time.Duration `json:"Interval"`
		Timeout  time.Duration `json:"Timeout"`
	} `json:"Healthcheck"`
}

// TestImage builds the image through `go tool task image`, as a deployer
// does, and checks it: its configuration (serve as entrypoint, a non-root
// user, the exposed port, a healthcheck on /readyz), its files (a static
// binary and the CA certificates), that a second build gives the same image
// ID, and, where podman can run a container on this machine, that it serves
// /readyz with 200 against the test PostgreSQL.
func TestImage(t *testing.T) {
	requirePodman(t)
	root := moduleRoot(t)
	tag := taskImageTag(t)

	id := buildImage(t, root)
	img := inspectImage(t, tag)
	require.Equal(t, id, img.ID)

	t.Run("config", func(t *testing.T) {
		require.Equal(t, "linux", img.Os)
		require.Equal(t, []string{"/atomicrides", "serve"}, img.Config.Entrypoint)
		require.Empty(t, img.Config.Cmd, "no -dev, no argument: serve as configured by the environment")
		require.Equal(t, "65532:65532", img.Config.User, "numeric, so that scratch needs no /etc/passwd; not root")
		require.Equal(t, map[string]struct{}{"8080/tcp": {}}, img.Config.ExposedPorts)
		require.Contains(t, img.Config.Env, "ADDR=:8080", "listens on every interface, on the exposed port")
		require.NotNil(t, img.Healthcheck, "a docker-format image: OCI images have no healthcheck")
		require.Equal(t, []string{"CMD", "/atomicrides", "healthcheck"}, img.Healthcheck.Test)
		require.Positive(t, img.Healthcheck.Interval)
		require.Positive(t, img.Healthcheck.Timeout)
	})

	t.Run("files", func(t *testing.T) {
		dir := mountImage(t, tag)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		require.ElementsMatch(t, []string{"atomicrides", "etc"}, names, "scratch: the binary and the certificates, nothing else")

		bin := filepath.Join(dir, "atomicrides")
		info, err := os.Stat(bin)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o755), info.Mode().Perm())
		f, err := elf.Open(bin)
		require.NoError(t, err)
		defer f.Close()
		for _, p := range f.Progs {
			require.NotEqual(t, elf.PT_INTERP, p.Type, "a static binary: scratch has no dynamic loader")
		}

		certs, err := os.ReadFile(filepath.Join(dir, "etc/ssl/certs/ca-certificates.crt"))
		require.NoError(t, err)
		host, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
		require.NoError(t, err)
		require.True(t, bytes.Equal(host, certs), "the host's CA bundle, for Stripe's and the SMTP server's TLS")
	})

	t.Run("reproducible", func(t *testing.T) {
		// The same inputs (source, SOURCE_DATE_EPOCH: the last commit's
		// time) under another tag, rebuilt without podman's cache.
		other := "localhost/atomicrides:reproducible-check"
		// Untag this name only: without one, untag removes every name of the
		// image, the task's included.
		t.Cleanup(func() { _ = exec.Command("podman", "untag", other, other).Run() })
		out := run(t, root, "go", "tool", "task", "image", "--", other)
		require.Equal(t, other+" "+id, lastLine(out), "a second build of the same source is the same image")
	})

	t.Run("runs", func(t *testing.T) {
		flags, why := containerRuntime(t, tag)
		if flags == nil {
			t.Logf("podman cannot run a container on this machine, so the image was built and inspected but not run:\n%s", why)
			return
		}
		t.Logf("podman runs containers here with %q; before that:\n%s", flags, why)
		runImage(t, flags, tag)
	})
}

// runImage runs the image as compose does, against a fresh database of the
// test PostgreSQL on the host's network: the example environment unchanged
// is refused; with its placeholders replaced, migrate succeeds, then serve
// (-no-migrate) answers 200 on /readyz, as the image's user, and the
// image's healthcheck passes.
func runImage(t *testing.T, runFlags []string, tag string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	envFile, err := filepath.Abs(envFileName + ".example")
	require.NoError(t, err)

	// As committed, the example starts nothing: its placeholders are not
	// valid secrets.
	refused := podman(ctx, append(append([]string{"run", "--rm", "--pull=never"}, runFlags...), "--env-file", envFile, tag)...)
	require.Equal(t, 1, refused.code, "stdout: %s\nstderr: %s", refused.stdout, refused.stderr)
	require.Contains(t, refused.stderr, "atomicrides: STRIPE_SECRET_KEY: not a Stripe secret key")
	require.Contains(t, refused.stderr, "atomicrides: ADMIN_TOKEN: too short")

	port := binrun.FreePort(t)
	env := []string{
		"--network", "host", "--env-file", envFile, // as compose: then the deployer's values
		"-e", "DATABASE_URL=" + dbtest.NewURL(t),
		"-e", "STRIPE_SECRET_KEY=sk_test_imagecheck",
		"-e", "SMTP_URL=smtp://127.0.0.1:1", // never dialled: no ride is booked
		"-e", "ADMIN_TOKEN=" + randomHex(t, 24),
		"-e", fmt.Sprintf("ADDR=127.0.0.1:%d", port), // the host's network: a free port
	}

	migrate := podman(ctx, append(append(append([]string{"run", "--rm", "--pull=never"}, runFlags...), env...), "--entrypoint", "/atomicrides", tag, "migrate")...)
	require.Equal(t, 0, migrate.code, "migrate: %s", migrate.stderr)
	require.Contains(t, migrate.stderr, "msg=migrated")

	name := "atomicrides-imagetest-" + randomHex(t, 6)
	started := podman(ctx, append(append(append([]string{"run", "-d", "--pull=never", "--name", name}, runFlags...), env...), tag, "-no-migrate")...)
	require.Equal(t, 0, started.code, "run: %s", started.stderr)
	t.Cleanup(func() {
		if t.Failed() {
			logs := podman(context.Background(), "logs", name)
			t.Logf("container logs:\n%s%s", logs.stdout, logs.stderr)
		}
		_ = exec.Command("podman", "rm", "-f", "-t", "10", name).Run()
	})

	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", port)
	err = binrun.Poll(ctx, time.Minute, func() error {
		if st := podman(ctx, "inspect", "--format", "{{.State.Running}}", name); strings.TrimSpace(st.stdout) != "true" {
			return binrun.GiveUp(fmt.Errorf("the container is not running: %s%s", st.stdout, st.stderr))
		}
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /readyz: %s", resp.Status)
		}
		return nil
	})
	require.NoError(t, err)

	// The serving process runs as the image's user, not as root.
	pid := strings.TrimSpace(podman(ctx, "inspect", "--format", "{{.State.Pid}}", name).stdout)
	status, err := os.ReadFile("/proc/" + pid + "/status")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^Uid:\s+65532\s`, string(status))
	require.Regexp(t, `(?m)^Gid:\s+65532\s`, string(status))

	// The image's HEALTHCHECK, run on demand (its timer needs systemd).
	hc := podman(ctx, "healthcheck", "run", name)
	require.Equal(t, 0, hc.code, "healthcheck: %s%s", hc.stdout, hc.stderr)
	health := podman(ctx, "inspect", "--format", "{{.State.Health.Status}}", name)
	require.Equal(t, "healthy", strings.TrimSpace(health.stdout), health.stderr)
}

// runtimeCandidates are the ways of running a container tried in turn: the
// default runtime; the same without raising rlimits above what an
// unprivileged container host allows; runc, which (unlike crun) accepts
// cgroups in hybrid mode.
var runtimeCandidates = [][]string{
	{},
	{"--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"},
	{"--runtime", "runc", "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"},
}

// containerRuntime returns the podman run flags of the first candidate with
// which the image runs (its serve --help: it prints its usage and exits 0),
// or nil; and what each candidate tried before it answered.
func containerRuntime(t *testing.T, tag string) (flags []string, why string) {
	var tried []string
	for _, c := range runtimeCandidates {
		if len(c) > 1 && c[0] == "--runtime" {
			if _, err := exec.LookPath(c[1]); err != nil {
				tried = append(tried, fmt.Sprintf("  %q: %s is not installed", c, c[1]))
				continue
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		args := append(append([]string{"run", "--rm", "--pull=never", "--no-healthcheck"}, c...), tag, "--help")
		r := podman(ctx, args...)
		cancel()
		if r.code == 0 && strings.HasPrefix(r.stdout, "usage: atomicrides serve") {
			return c, strings.Join(tried, "\n")
		}
		tried = append(tried, fmt.Sprintf("  podman %s: exit %d: %s", strings.Join(args, " "), r.code, lastLine(r.stderr)))
	}
	return nil, strings.Join(tried, "\n")
}

// requirePodman skips the test where podman is missing, and fails it under
// CI=true, where .ci/run installs it.
func requirePodman(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("podman not found: .ci/run installs it (apt-get install podman)")
		}
		t.Skip("podman not found (apt-get install podman): the image is neither built nor checked")
	}
}

// buildImage runs `go tool task image` and returns the ID of the image it
// built, as the task prints it.
func buildImage(t *testing.T, root string) string {
	t.Helper()
	out := run(t, root, "go", "tool", "task", "image")
	tag, id, ok := strings.Cut(lastLine(out), " ")
	require.True(t, ok, "task image prints TAG ID: %q", out)
	require.Equal(t, taskImageTag(t), tag)
	return id
}

func inspectImage(t *testing.T, tag string) imageConfig {
	t.Helper()
	r := podman(context.Background(), "image", "inspect", tag)
	require.Equal(t, 0, r.code, r.stderr)
	var imgs []imageConfig
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &imgs))
	require.Len(t, imgs, 1)
	return imgs[0]
}

// mountImage mounts the image's file system read-only and returns its
// directory; it is unmounted when t ends.
func mountImage(t *testing.T, tag string) string {
	t.Helper()
	r := podman(context.Background(), "image", "mount", tag)
	require.Equal(t, 0, r.code, "podman image mount (root only): %s", r.stderr)
	t.Cleanup(func() { _ = exec.Command("podman", "image", "unmount", tag).Run() })
	return strings.TrimSpace(r.stdout)
}

// podmanResult is what a podman command printed, and its exit code.
type podmanResult struct {
	stdout, stderr string
	code           int
}

// podman runs podman with args; an exit code other than 0 is in the result,
// a command that could not run at all is code -1.
func podman(ctx context.Context, args ...string) podmanResult {
	cmd := exec.CommandContext(ctx, "podman", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		code = -1
		if exit, ok := err.(*exec.ExitError); ok && exit.ExitCode() >= 0 {
			code = exit.ExitCode()
		}
	}
	return podmanResult{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// run runs a command in dir within ten minutes and returns its stdout,
// failing t if it fails.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "%s %s:\n%s%s", name, strings.Join(args, " "), stdout.String(), stderr.String())
	return stdout.String()
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := binrun.ModuleRoot()
	require.NoError(t, err)
	return root
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}
