package deploy

import (
	"bufio"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// composeFile is the part of a compose file the tests read.
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string                       `yaml:"image"`
	PullPolicy  string                       `yaml:"pull_policy"`
	Entrypoint  []string                     `yaml:"entrypoint"`
	Command     []string                     `yaml:"command"`
	EnvFile     []string                     `yaml:"env_file"`
	Ports       []string                     `yaml:"ports"`
	DependsOn   map[string]map[string]string `yaml:"depends_on"`
	Healthcheck map[string]any               `yaml:"healthcheck"`
	Restart     string                       `yaml:"restart"`
	Volumes     []string                     `yaml:"volumes"`
}

// envFileName is the environment file compose.yaml reads; the repository
// holds its example.
const envFileName = "atomicrides.env"

// readCompose parses compose.yaml strictly: a key the struct does not know
// is an error, so that a typo (depend_on) cannot pass unnoticed.
func readCompose(t *testing.T) composeFile {
	t.Helper()
	f, err := os.Open("compose.yaml")
	require.NoError(t, err)
	defer f.Close()
	var c composeFile
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&c))
	return c
}

// readEnvExample parses the example environment: KEY=VALUE lines, comments
// and blank lines, as compose reads an env_file.
func readEnvExample(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(envFileName + ".example")
	require.NoError(t, err)
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "not KEY=VALUE: %q", line)
		require.Regexp(t, `^[A-Z][A-Z0-9_]*$`, k)
		require.NotContains(t, env, k, "set twice")
		env[k] = v
	}
	require.NoError(t, sc.Err())
	return env
}

// taskImageTag is the tag that `go tool task image` builds (the task's
// IMAGE variable).
func taskImageTag(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "Taskfile.yml"))
	require.NoError(t, err)
	var tf struct {
		Tasks map[string]struct {
			Vars map[string]any `yaml:"vars"`
			Cmds []any          `yaml:"cmds"`
		} `yaml:"tasks"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &tf))
	task, ok := tf.Tasks["image"]
	require.True(t, ok, "Taskfile.yml has an image task")
	tag, ok := task.Vars["IMAGE"].(string)
	require.True(t, ok, "the image task's IMAGE is a tag: %v", task.Vars["IMAGE"])
	require.NotEmpty(t, tag)
	require.Contains(t, task.Cmds, "bash deploy/image.sh {{.CLI_ARGS | default .IMAGE}}", "the task runs the script the tests check")
	return tag
}

// TestCompose checks compose.yaml as compose reads it: PostgreSQL 15 or
// later, a one-shot migrate that waits for it to be healthy, then the
// service, which starts only once migrate has succeeded, without -dev, on
// the image the task builds, with the environment of atomicrides.env.
func TestCompose(t *testing.T) {
	t.Parallel()
	c := readCompose(t)
	require.ElementsMatch(t, []string{"postgres", "migrate", "atomicrides"}, keys(c.Services))

	pg := c.Services["postgres"]
	m := regexp.MustCompile(`^docker\.io/library/postgres:(\d+)$`).FindStringSubmatch(pg.Image)
	require.NotNil(t, m, "postgres image %q: the official image, a major version", pg.Image)
	major, _ := strconv.Atoi(m[1])
	require.GreaterOrEqual(t, major, 15)
	require.NotEmpty(t, pg.Healthcheck["test"], "migrate waits for postgres to be healthy")
	require.Equal(t, []string{"pgdata:/var/lib/postgresql/data"}, pg.Volumes, "the data outlives the container")
	require.Contains(t, c.Volumes, "pgdata")

	tag := taskImageTag(t)
	migrate, svc := c.Services["migrate"], c.Services["atomicrides"]
	for name, s := range map[string]composeService{"migrate": migrate, "atomicrides": svc} {
		require.Equal(t, tag, s.Image, "%s runs the image `go tool task image` builds", name)
		require.Equal(t, "never", s.PullPolicy, "%s: the image is built here, never pulled", name)
		require.Equal(t, []string{envFileName}, s.EnvFile, name)
		require.NotContains(t, s.Command, "-dev", name)
		require.NotContains(t, s.Entrypoint, "-dev", name)
	}
	require.Equal(t, []string{envFileName}, pg.EnvFile, "postgres creates the role DATABASE_URL names")

	require.Equal(t, []string{"/atomicrides", "migrate"}, migrate.Entrypoint)
	require.Equal(t, map[string]map[string]string{"postgres": {"condition": "service_healthy"}}, migrate.DependsOn)
	require.Equal(t, "no", migrate.Restart, "a one-shot: it exits when the migrations are applied")

	require.Empty(t, svc.Entrypoint, "the image's entrypoint: serve")
	require.Equal(t, []string{"-no-migrate"}, svc.Command, "migrate has applied them")
	require.Equal(t, map[string]map[string]string{"migrate": {"condition": "service_completed_successfully"}}, svc.DependsOn)
	require.Equal(t, []string{"8080:8080"}, svc.Ports, "the image's ADDR and EXPOSE")
}

// TestEnvExample checks the example environment: every variable serve
// requires without -dev is there; DATABASE_URL reaches the postgres
// service, as the role and database it creates; the secrets are
// placeholders.
func TestEnvExample(t *testing.T) {
	t.Parallel()
	env := readEnvExample(t)
	for _, k := range []string{"DATABASE_URL", "STRIPE_SECRET_KEY", "SMTP_URL", "ADMIN_TOKEN", "MAIL_FROM", "POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"} {
		require.NotEmpty(t, env[k], k)
	}
	u, err := url.Parse(env["DATABASE_URL"])
	require.NoError(t, err)
	require.Equal(t, "postgres", u.Scheme)
	require.Equal(t, "postgres:5432", u.Host, "the compose service's name")
	require.Equal(t, env["POSTGRES_USER"], u.User.Username())
	pw, _ := u.User.Password()
	require.Equal(t, env["POSTGRES_PASSWORD"], pw)
	require.Equal(t, "/"+env["POSTGRES_DB"], u.Path)
	for _, k := range []string{"POSTGRES_PASSWORD", "STRIPE_SECRET_KEY", "SMTP_URL", "ADMIN_TOKEN", "DATABASE_URL"} {
		require.Contains(t, env[k], "CHANGE-ME", "%s is a placeholder, never a working secret", k)
	}
	require.NotContains(t, env, "ADDR", "the image's ADDR (:8080) matches the published port")

	gitignore, err := os.ReadFile(filepath.Join("..", ".gitignore"))
	require.NoError(t, err)
	require.Contains(t, strings.Split(string(gitignore), "\n"), "/deploy/"+envFileName, "the real environment, with its secrets, stays out of git")
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
