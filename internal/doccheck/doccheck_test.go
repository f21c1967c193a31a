package doccheck

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
)

func TestMain(m *testing.M) { binrun.Main(m) }

// TestDocs checks README.md and every page of docs/ in the repository: every
// relative link and anchor resolves, every quoted task is in Taskfile.yml,
// and every quoted `go run .` command is one the built binary lists.
func TestDocs(t *testing.T) {
	t.Parallel()
	root, err := binrun.ModuleRoot()
	require.NoError(t, err)

	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "docs/ holds the documentation")
	files = append(files, filepath.Join(root, "README.md"))
	pages := map[string]Page{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		rel, err := filepath.Rel(root, f)
		require.NoError(t, err)
		pages[rel] = Parse(string(b))
	}

	taskfile, err := os.ReadFile(filepath.Join(root, "Taskfile.yml"))
	require.NoError(t, err)
	tasks, err := Tasks(taskfile)
	require.NoError(t, err)
	require.True(t, tasks["test"], "Taskfile.yml has the test task")

	cmds, err := ReadCommands(func(args ...string) (string, error) {
		r := binrun.RunT(t, nil, args...)
		require.Equal(t, 0, r.ExitCode, "atomicrides %s: %s", strings.Join(args, " "), r.Stderr)
		return r.Stdout, nil
	})
	require.NoError(t, err)
	require.Contains(t, cmds, "serve", "the binary's --help lists its commands")
	require.Contains(t, cmds["keys"], "list", "keys --help names its subcommands")

	var links, quoted int
	for _, p := range pages {
		links += len(p.Links)
		for _, c := range p.Code {
			quoted += len(TaskRefs(c)) + len(CommandRefs(c))
		}
	}
	require.Greater(t, links, 20, "the pages link to each other")
	require.Greater(t, quoted, 20, "the pages quote commands")

	// The alerts' runbooks are sections of the docs too.
	rules, err := os.ReadFile(filepath.Join(root, "ops", "prometheus", "rules.yml"))
	require.NoError(t, err)
	runbooks := RunbookLinks(rules)
	require.NotEmpty(t, runbooks, "every alert names its runbook")
	withRunbooks := maps.Clone(pages)
	withRunbooks["ops/prometheus/rules.yml"] = Page{Links: runbooks}

	problems := append(CheckLinks(root, withRunbooks), CheckCommands(pages, tasks, cmds)...)
	for _, p := range problems {
		t.Error(p)
	}
}

// TestSlug gives headings the anchors GitHub gives them.
func TestSlug(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"Two commands": "two-commands",
		"Alert: AtomicRidesCompletionsDeadLettered":      "alert-atomicridescompletionsdeadlettered",
		"The reference at `/docs`":                       "the-reference-at-docs",
		"Money safety: what restores, failovers and ...": "money-safety-what-restores-failovers-and-",
		"New rides, Stripe latency 200ms":                "new-rides-stripe-latency-200ms",
		"The `book` command":                             "the-book-command",
		"[Linked](other.md) heading":                     "linked-heading",
		"snake_case and a-b — dash":                      "snake_case-and-a-b--dash",
		"Café über":                                      "café-über",
	} {
		require.Equal(t, want, Slug(heading), heading)
	}
}

// TestParse finds headings (repeated ones numbered), links outside code only,
// code spans wrapped across lines, and ignores headings inside code blocks.
func TestParse(t *testing.T) {
	t.Parallel()
	p := Parse(strings.Join([]string{
		"# Title",
		"",
		"See [the API](docs/api.md#retries) and `go tool task",
		"generate`, not `[a](b.md)`.",
		"",
		"```sh",
		"# not a heading",
		"go run . keys list -dead",
		"```",
		"",
		"## Title",
		"| a | [b](#title-1) |",
	}, "\n"))
	require.Equal(t, map[string]bool{"title": true, "title-1": true}, p.Anchors)
	require.Equal(t, []Ref{{Text: "docs/api.md#retries", Line: 3}, {Text: "#title-1", Line: 12}}, p.Links)
	require.Equal(t, []Ref{
		{Text: "go tool task generate", Line: 3},
		{Text: "[a](b.md)", Line: 4},
		{Text: "# not a heading", Line: 7},
		{Text: "go run . keys list -dead", Line: 8},
	}, p.Code)
}

// TestCheckLinksReportsBrokenOnes resolves links in a tree of pages: good
// links pass; a missing file, a missing heading in another page or in the
// same one, and an anchor into a file that is not a page are each reported
// with their page and line.
func TestCheckLinksReportsBrokenOnes(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(rel, content string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, rel), []byte(content), 0o644))
	}
	write("README.md", "# Top\n\n[ops](docs/ops.md#alerts) [dir](docs) [web](https://example.com/x#y)\n[gone](docs/gone.md)\n[self](#top) [nope](#bottom)\n")
	write("docs/ops.md", "# Ops\n\n## Alerts\n\n[up](../README.md#top) [code](../main.go#L1) [missing](api.md#retries)\n")
	write("docs/api.md", "# API\n\n## Replays\n")
	write("main.go", "package main\n")

	pages := map[string]Page{}
	for _, rel := range []string{"README.md", "docs/ops.md"} {
		b, err := os.ReadFile(filepath.Join(root, rel))
		require.NoError(t, err)
		pages[rel] = Parse(string(b))
	}
	var got []string
	for _, p := range CheckLinks(root, pages) {
		got = append(got, p.String())
	}
	require.Equal(t, []string{
		"README.md:4: link docs/gone.md: no such file or directory docs/gone.md",
		"README.md:5: link #bottom: no heading #bottom in README.md",
		"docs/ops.md:5: link ../main.go#L1: an anchor into main.go, which is not a Markdown page",
		"docs/ops.md:5: link api.md#retries: no heading #retries in docs/api.md",
	}, got)
}

// TestCheckCommands reports tasks missing from the Taskfile and commands and
// subcommands the binary lacks, and lets flags, ids and placeholders be.
func TestCheckCommands(t *testing.T) {
	t.Parallel()
	tasks, err := Tasks([]byte("version: '3'\ntasks:\n  test:\n    cmds: [go test ./...]\n  db:down:\n    cmds: [x]\n"))
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"test": true, "db:down": true}, tasks)

	cmds, err := ReadCommands(func(args ...string) (string, error) {
		switch strings.Join(args, " ") {
		case "--help":
			return "usage: atomicrides [COMMAND]\n\ncommands:\n  serve  run it\n  keys   operators\n\nRun ...\n", nil
		case "serve --help":
			return "usage: atomicrides serve [-dev]\n", nil
		case "keys --help":
			return "usage: atomicrides keys list|show ...\n", nil
		}
		t.Fatalf("unexpected %v", args)
		return "", nil
	})
	require.NoError(t, err)
	require.Equal(t, Commands{"serve": nil, "keys": {"list", "show"}}, cmds)

	pages := map[string]Page{"README.md": {Code: []Ref{
		{Text: "go tool task test -- -run TestX", Line: 1},
		{Text: "go tool task --list", Line: 2},
		{Text: "task db:down", Line: 3},
		{Text: "go tool task tset", Line: 4},
		{Text: "go run . serve -dev && go run . keys show 42", Line: 5},
		{Text: "ATOMICRIDES_API_KEY=x go run . book --from 1,2", Line: 6},
		{Text: "go run . keys lsit -dead", Line: 7},
		{Text: "go run ./internal/pgenv/cmd/pgenv up", Line: 8},
	}}}
	var got []string
	for _, p := range CheckCommands(pages, tasks, cmds) {
		got = append(got, p.String())
	}
	require.Equal(t, []string{
		"README.md:4: task \"tset\": no such task in Taskfile.yml (in `go tool task tset`)",
		"README.md:6: go run . book: the binary has no command \"book\" (in `ATOMICRIDES_API_KEY=x go run . book --from 1,2`)",
		"README.md:7: go run . keys lsit: keys has no subcommand \"lsit\", only list, show (in `go run . keys lsit -dead`)",
	}, got)
}

// TestRunbookLinks reads an alert's runbook URL into the repository as a link
// from its root, and one outside it as a link CheckLinks refuses.
func TestRunbookLinks(t *testing.T) {
	t.Parallel()
	rules := "groups:\n  - rules:\n      - alert: A\n        annotations:\n          runbook_url: " + RepoURL + "docs/operations.md#alert-a\n" +
		"      - alert: B\n        annotations:\n          runbook_url: 'https://wiki.example.com/b'\n"
	refs := RunbookLinks([]byte(rules))
	require.Equal(t, []Ref{{Text: "/docs/operations.md#alert-a", Line: 5}, {Text: "outside:https://wiki.example.com/b", Line: 8}}, refs)

	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "docs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "docs", "operations.md"), []byte("# Ops\n\n### Alert: A\n"), 0o644))
	var got []string
	for _, p := range CheckLinks(root, map[string]Page{"rules.yml": {Links: refs}}) {
		got = append(got, p.String())
	}
	require.Equal(t, []string{"rules.yml:8: link outside:https://wiki.example.com/b: not a page of " + RepoURL}, got)
}

// TestReadmeQuotesTheCITestCommand keeps the README's test command the one
// that CI runs, word for word: a newcomer who types it runs what CI runs.
func TestReadmeQuotesTheCITestCommand(t *testing.T) {
	t.Parallel()
	root, err := binrun.ModuleRoot()
	require.NoError(t, err)
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^time (go tool task test\b[^\n#]*?)\s*$`).FindSubmatch(ci)
	require.NotNil(t, m, ".ci/run runs the tests through go tool task test")
	cmd := string(m[1])

	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	var quoted bool
	for _, c := range Parse(string(readme)).Code {
		quoted = quoted || c.Text == cmd || strings.HasPrefix(c.Text, cmd+" #")
	}
	require.True(t, quoted, "README.md quotes %q, the command .ci/run runs, as code of its own", cmd)
}

// TestOperationsListsEveryVariable keeps docs/operations.md's list of
// variables complete: every variable config.go reads is quoted there.
func TestOperationsListsEveryVariable(t *testing.T) {
	t.Parallel()
	root, err := binrun.ModuleRoot()
	require.NoError(t, err)
	src, err := os.ReadFile(filepath.Join(root, "config.go"))
	require.NoError(t, err)
	vars := ConfigVars(src)
	require.Contains(t, vars, "DATABASE_URL")
	require.Contains(t, vars, "ATOMICRIDES_API_KEY")
	page, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	require.NoError(t, err)
	for _, v := range UndocumentedVars(Parse(string(page)), vars) {
		t.Errorf("config.go reads %s, which docs/operations.md (Configuration) does not list", v)
	}
}

// TestConfigVars finds the variables a config.go reads and reports those a
// page does not quote.
func TestConfigVars(t *testing.T) {
	t.Parallel()
	src := `Lease: r.duration("LEASE"), Addr: r.addr("ADDR", defaultAddr), key: getenv("API_KEY"), again: r.duration("LEASE"), not: "OTHER"`
	vars := ConfigVars([]byte(src))
	require.Equal(t, []string{"LEASE", "ADDR", "API_KEY"}, vars)
	page := Parse("| `LEASE` | x |\n| `ADDR`, `PORT` | y |\n\nAPI_KEY in prose only.\n")
	require.Equal(t, []string{"API_KEY"}, UndocumentedVars(page, vars))
}

// TestWebhooksDocumentEveryHandledEvent: docs/webhooks.md's tables say what
// each Stripe event type and each Adyen event code the code acts on does,
// and call none of them ignored. The handled events are read from the
// code, so that an event handled tomorrow fails this until it is
// documented.
func TestWebhooksDocumentEveryHandledEvent(t *testing.T) {
	t.Parallel()
	root, err := binrun.ModuleRoot()
	require.NoError(t, err)
	read := func(rel string) []byte {
		b, err := os.ReadFile(filepath.Join(root, rel))
		require.NoError(t, err)
		return b
	}
	page := string(read("docs/webhooks.md"))

	stripe, err := HandledStripeTypes(read("service/payments/webhooks.go"))
	require.NoError(t, err)
	require.Contains(t, stripe, "charge.refunded")
	require.Contains(t, stripe, "charge.dispute.*")
	stripeRows, err := EventTable(page, "What each event does")
	require.NoError(t, err)

	adyen, err := HandledAdyenCodes(read("service/adyen/notifications.go"))
	require.NoError(t, err)
	require.Contains(t, adyen, "AUTHORISATION")
	require.Contains(t, adyen, "CAPTURE")
	adyenRows, err := EventTable(page, "Adyen's notifications")
	require.NoError(t, err)

	for _, p := range append(CheckEvents("docs/webhooks.md", stripeRows, stripe), CheckEvents("docs/webhooks.md", adyenRows, adyen)...) {
		t.Error(p)
	}
}

// TestCheckEvents reports a handled event the table leaves out or calls
// ignored, and reads the table's shorthand.
func TestCheckEvents(t *testing.T) {
	t.Parallel()
	page := "# Events\n\nSome prose.\n\n" +
		"| event | effect |\n|---|---|\n" +
		"| `a.created`, `.updated` | moves it |\n" +
		"| `refund.*` | records it |\n" +
		"| `b.done` / `.failed` | ends it |\n" +
		"| any other (`CAPTURE`, `X`) | `ignored_type`, counted |\n\n# Next\n\n| `late` | x |\n"
	rows, err := EventTable(page, "Events")
	require.NoError(t, err)
	require.Len(t, rows, 4)
	require.Equal(t, []string{"a.created", "a.updated"}, rows[0].Names)
	require.Equal(t, []string{"b.done", "b.failed"}, rows[2].Names)
	require.Empty(t, CheckEvents("p.md", rows, []string{"a.updated", "refund.created", "refund.*", "b.*"}))

	problems := CheckEvents("p.md", rows, []string{"a.deleted", "CAPTURE", "c.*", "late"})
	var msgs []string
	for _, p := range problems {
		msgs = append(msgs, p.String())
	}
	require.Len(t, problems, 4, "%v", msgs)
	require.Contains(t, msgs[0], "p.md:7: a.deleted is handled by the code, yet no row")
	require.Contains(t, msgs[1], "p.md:10: CAPTURE is handled by the code, yet this row says it is ignored")
	require.Contains(t, msgs[3], "late is handled by the code, yet no row", "a table under another heading is not this one")

	_, err = EventTable(page, "Nowhere")
	require.Error(t, err)
}

// TestHandledEventsFromCode reads the handled events off the code's
// constants and comparisons.
func TestHandledEventsFromCode(t *testing.T) {
	t.Parallel()
	codes, err := HandledAdyenCodes([]byte("package a\nconst (\n\tEventB = \"B\"\n\tEventA = \"A\"\n\tother = \"C\"\n)\nconst EventD = \"D\"\n"))
	require.NoError(t, err)
	require.Equal(t, []string{"A", "B", "D"}, codes)
	types, err := HandledStripeTypes([]byte("package p\nimport \"strings\"\nfunc f(t, u string) {\n\tswitch {\n\tcase t == \"x.a\" || \"x.b\" == t:\n\tcase strings.HasPrefix(t, \"y.\"):\n\tcase u == \"z\":\n\t}\n}\n"))
	require.NoError(t, err)
	require.Equal(t, []string{"x.a", "x.b", "y.*"}, types)
}
