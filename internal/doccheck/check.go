package doccheck

import (
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Problem is one reference of a page that leads nowhere.
type Problem struct {
	File string // the page, relative to the root given to the check
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

var schemeRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// CheckLinks resolves the relative links of pages (paths relative to root,
// each already parsed) against the files under root: the file or directory a
// link names must exist, and an anchor must be a heading of the page it
// names (a Markdown page; of the linking page itself for a bare #anchor).
// Links with a scheme are not checked.
func CheckLinks(root string, pages map[string]Page) []Problem {
	var problems []Problem
	parsed := maps.Clone(pages) // and the pages that links lead to
	anchorsOf := func(rel string) (map[string]bool, error) {
		if p, ok := parsed[rel]; ok {
			return p.Anchors, nil
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return nil, err
		}
		p := Parse(string(b))
		parsed[rel] = p
		return p.Anchors, nil
	}
	for _, file := range sortedKeys(pages) {
		for _, l := range pages[file].Links {
			bad := func(format string, args ...any) {
				problems = append(problems, Problem{File: file, Line: l.Line, Msg: fmt.Sprintf("link %s: ", l.Text) + fmt.Sprintf(format, args...)})
			}
			if strings.HasPrefix(l.Text, "outside:") {
				bad("not a page of %s", RepoURL)
				continue
			}
			if schemeRe.MatchString(l.Text) {
				continue
			}
			path, anchor, _ := strings.Cut(l.Text, "#")
			path, err := url.PathUnescape(path)
			if err != nil {
				bad("%v", err)
				continue
			}
			target := file
			if path != "" {
				if strings.HasPrefix(path, "/") {
					target = filepath.Clean(strings.TrimPrefix(path, "/"))
				} else {
					target = filepath.Clean(filepath.Join(filepath.Dir(file), path))
				}
				if target == ".." || strings.HasPrefix(target, "../") {
					bad("outside the repository")
					continue
				}
				if _, err := os.Stat(filepath.Join(root, target)); err != nil {
					bad("no such file or directory %s", target)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				bad("an anchor into %s, which is not a Markdown page", target)
				continue
			}
			anchors, err := anchorsOf(target)
			if err != nil {
				bad("%v", err)
				continue
			}
			if !anchors[strings.ToLower(anchor)] {
				bad("no heading #%s in %s", anchor, target)
			}
		}
	}
	return problems
}

var (
	goToolTaskRe = regexp.MustCompile(`\bgo tool task ([^\s;|&)]+)`)
	bareTaskRe   = regexp.MustCompile(`^task ([^\s;|&)]+)`)
	goRunRe      = regexp.MustCompile(`\bgo run \. ([a-z][a-z0-9-]*)(?: ([a-z][a-z0-9-]*))?`)
)

// TaskRefs returns the task names that code quotes: `go tool task NAME`
// anywhere in it, or `task NAME` at its start. Options (go tool task --list)
// are not task names.
func TaskRefs(code Ref) []Ref {
	var refs []Ref
	matches := goToolTaskRe.FindAllStringSubmatch(code.Text, -1)
	matches = append(matches, bareTaskRe.FindAllStringSubmatch(code.Text, -1)...)
	for _, m := range matches {
		if !strings.HasPrefix(m[1], "-") {
			refs = append(refs, Ref{Text: m[1], Line: code.Line})
		}
	}
	return refs
}

// CommandRefs returns the commands that code runs through `go run .`: the
// command, followed by the word after it when that word could be a
// subcommand (a flag, a number or a placeholder is not).
func CommandRefs(code Ref) []Ref {
	var refs []Ref
	for _, m := range goRunRe.FindAllStringSubmatch(code.Text, -1) {
		refs = append(refs, Ref{Text: strings.TrimSpace(m[1] + " " + m[2]), Line: code.Line})
	}
	return refs
}

// Tasks returns the names of the tasks a Taskfile defines.
func Tasks(taskfile []byte) (map[string]bool, error) {
	var tf struct {
		Tasks map[string]yaml.Node `yaml:"tasks"`
	}
	if err := yaml.Unmarshal(taskfile, &tf); err != nil {
		return nil, fmt.Errorf("doccheck: Taskfile: %w", err)
	}
	if len(tf.Tasks) == 0 {
		return nil, fmt.Errorf("doccheck: Taskfile: no tasks")
	}
	names := map[string]bool{}
	for name := range tf.Tasks {
		names[name] = true
	}
	return names, nil
}

// Commands is the command line of the binary: each command, with the
// subcommands it takes (nil for a command that takes none).
type Commands map[string][]string

var usageSubsRe = regexp.MustCompile(`^usage: \S+ (\S+) ([a-z][a-z0-9-]*(?:\|[a-z][a-z0-9-]*)+)`)

// ReadCommands asks the binary for its commands: help runs the binary with
// the arguments given and returns its standard output. The commands are the
// words listed under "commands:" by --help; a command's subcommands are the
// alternatives (list|show|…) its usage line names first.
func ReadCommands(help func(args ...string) (string, error)) (Commands, error) {
	out, err := help("--help")
	if err != nil {
		return nil, err
	}
	_, list, ok := strings.Cut(out, "\ncommands:\n")
	if !ok {
		return nil, fmt.Errorf("doccheck: --help lists no commands:\n%s", out)
	}
	cmds := Commands{}
	for _, line := range strings.Split(list, "\n") {
		if !strings.HasPrefix(line, "  ") {
			break
		}
		name := strings.Fields(line)[0]
		usage, err := help(name, "--help")
		if err != nil {
			return nil, err
		}
		cmds[name] = nil
		if m := usageSubsRe.FindStringSubmatch(usage); m != nil && m[1] == name {
			cmds[name] = strings.Split(m[2], "|")
		}
	}
	if len(cmds) == 0 {
		return nil, fmt.Errorf("doccheck: --help lists no commands:\n%s", out)
	}
	return cmds, nil
}

// CheckCommands reports the quoted tasks that tasks lacks and the quoted
// `go run .` commands (and subcommands) that cmds lacks, in every page.
func CheckCommands(pages map[string]Page, tasks map[string]bool, cmds Commands) []Problem {
	var problems []Problem
	for _, file := range sortedKeys(pages) {
		for _, code := range pages[file].Code {
			for _, t := range TaskRefs(code) {
				if !tasks[t.Text] {
					problems = append(problems, Problem{File: file, Line: t.Line, Msg: fmt.Sprintf("task %q: no such task in Taskfile.yml (in `%s`)", t.Text, code.Text)})
				}
			}
			for _, c := range CommandRefs(code) {
				name, sub, _ := strings.Cut(c.Text, " ")
				subs, ok := cmds[name]
				switch {
				case !ok:
					problems = append(problems, Problem{File: file, Line: c.Line, Msg: fmt.Sprintf("go run . %s: the binary has no command %q (in `%s`)", c.Text, name, code.Text)})
				case sub != "" && subs != nil && !slices.Contains(subs, sub):
					problems = append(problems, Problem{File: file, Line: c.Line, Msg: fmt.Sprintf("go run . %s: %s has no subcommand %q, only %s (in `%s`)", c.Text, name, sub, strings.Join(subs, ", "), code.Text)})
				}
			}
		}
	}
	return problems
}

func sortedKeys(pages map[string]Page) []string {
	return slices.Sorted(maps.Keys(pages))
}

// RepoURL is where the repository's files are browsed; links into it from
// outside the docs (the alerts' runbook URLs) are checked as links to the
// files under it.
const RepoURL = "https://github.com/atomicrides/atomicrides/blob/main/"

var runbookRe = regexp.MustCompile(`runbook_url:\s*["']?(\S+?)["']?\s*$`)

// RunbookLinks returns the runbook_url of every alert of a Prometheus rules
// file as a link from the repository's root ("/docs/operations.md#alert-…"),
// so that CheckLinks resolves it; a runbook outside the repository is
// returned as "outside:" and its URL, which CheckLinks reports.
func RunbookLinks(rules []byte) []Ref {
	var refs []Ref
	for i, line := range strings.Split(string(rules), "\n") {
		if m := runbookRe.FindStringSubmatch(line); m != nil {
			target, ok := strings.CutPrefix(m[1], RepoURL)
			if ok {
				target = "/" + target
			} else {
				target = "outside:" + m[1]
			}
			refs = append(refs, Ref{Text: target, Line: i + 1})
		}
	}
	return refs
}

var (
	configVarRe = regexp.MustCompile(`(?:\br\.\w+|\bgetenv)\("([A-Z][A-Z0-9_]*)"`)
	upperWordRe = regexp.MustCompile(`[A-Z][A-Z0-9_]*`)
)

// ConfigVars returns the environment variables that config.go (its source
// given) reads: the names passed to its readers (r.duration("LEASE"), …) and
// to getenv.
func ConfigVars(configGo []byte) []string {
	seen := map[string]bool{}
	var names []string
	for _, m := range configVarRe.FindAllSubmatch(configGo, -1) {
		if name := string(m[1]); !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	return names
}

// UndocumentedVars returns the names among vars that page never quotes as
// code (`NAME`, or NAME within a code span or block, as in `A`, `B`).
func UndocumentedVars(page Page, vars []string) []string {
	quoted := map[string]bool{}
	for _, c := range page.Code {
		for _, w := range upperWordRe.FindAllString(c.Text, -1) {
			quoted[w] = true
		}
	}
	var missing []string
	for _, v := range vars {
		if !quoted[v] {
			missing = append(missing, v)
		}
	}
	return missing
}
