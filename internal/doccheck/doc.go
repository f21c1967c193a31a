// Package doccheck keeps the project's documentation honest: it reads
// README.md and every page under docs/ as a reader follows them and reports
// what would lead that reader nowhere.
//
// Three kinds of reference are checked:
//
//   - every relative link, [text](path) or [text](path#anchor) or
//     [text](#anchor), names a file or directory that exists, and its anchor
//     names a heading of the target page, by the slugs GitHub gives headings
//     ([Slug]);
//   - every quoted `go tool task NAME` (or `task NAME` opening a code span)
//     names a task of Taskfile.yml;
//   - every quoted `go run . COMMAND [SUBCOMMAND]` names a command the binary
//     lists in its --help, and a subcommand its COMMAND --help names.
//
// The runbook_url of every alert in ops/prometheus/rules.yml is checked as a
// link too: it must name a section of a page of this repository
// ([RunbookLinks]). docs/operations.md must quote every environment variable
// config.go reads ([ConfigVars], [UndocumentedVars]), and README.md the test
// command .ci/run runs, word for word.
//
// Only code (fenced blocks and `code spans`) is searched for commands, so
// prose may speak of tasks freely. Links with a scheme (https:, mailto:) are
// left to the reader's browser.
//
// The functions here are pure: [Parse] reads a page, [CheckLinks] resolves
// links against a directory tree, [TaskRefs] and [CommandRefs] extract the
// quoted commands. The package's test runs them over the repository,
// asking the built binary for its commands, as part of `go tool task test`.
package doccheck
