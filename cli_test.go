package main

import (
	"github.com/atomicrides/atomicrides/internal/binrun"

	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// unreachableDB is a DATABASE_URL nothing listens on: a command that
// touched the database with it would fail.
const unreachableDB = "DATABASE_URL=postgres://nobody@127.0.0.1:1/nothing?connect_timeout=1"

// TestCommandLine runs the built binary as its users would: help lists the
// commands, --help on any command prints its usage to stdout and exits 0
// without touching the database or starting anything, and a usage error is
// one line on stderr with exit status 2.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	env := []string{unreachableDB, "ATOMICRIDES_API_KEY="}

	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		r := binrun.RunT(t, env, args...)
		require.Equal(t, 0, r.ExitCode, "%v: %s", args, r.Stderr)
		require.Empty(t, r.Stderr, args)
		for _, c := range commandSummaries {
			require.Contains(t, r.Stdout, "\n  "+c.name+" ", "%v lists %s", args, c.name)
		}
	}

	for _, args := range [][]string{
		{"serve", "--help"}, {"serve", "-h"}, {"help", "serve"},
		{"migrate", "--help"}, {"openapi", "--help"},
		{"keys", "--help"}, {"keys", "-h"}, {"keys", "help"},
		{"keys", "list", "--help"}, {"keys", "show", "--help"}, {"keys", "complete", "-h"}, {"keys", "reconcile", "--help"},
		{"book", "--help"}, {"fakestripe", "--help"}, {"fakeadyen", "--help"}, {"mailsink", "--help"}, {"db", "--help"},
		{"healthcheck", "--help"}, {"help", "healthcheck"},
	} {
		r := binrun.RunT(t, env, args...)
		require.Equal(t, 0, r.ExitCode, "%v: %s", args, r.Stderr)
		require.Empty(t, r.Stderr, "%v starts nothing and logs nothing", args)
		require.True(t, strings.HasPrefix(r.Stdout, "usage: atomicrides "), "%v: %q", args, r.Stdout)
		name := args[0]
		if name == "help" {
			name = args[1]
		}
		require.Contains(t, r.Stdout, "usage: atomicrides "+name)
	}
	r := binrun.RunT(t, env, "keys", "list", "--help")
	require.Contains(t, r.Stdout, "-dead")
	require.Contains(t, r.Stdout, "-limit")
	r = binrun.RunT(t, env, "healthcheck", "--help")
	require.Contains(t, r.Stdout, "/readyz")
	require.Contains(t, r.Stdout, "-timeout")
	r = binrun.RunT(t, env, "serve", "--help")
	require.Contains(t, r.Stdout, "-dev")
	require.Contains(t, r.Stdout, "-no-migrate")

	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"nonsense"}, `unknown command "nonsense"`},
		{[]string{"help", "nonsense"}, `unknown command "nonsense"`},
		{[]string{"serve", "-bogus"}, "serve: flag provided but not defined: -bogus"},
		{[]string{"serve", "extra"}, `serve: unexpected argument "extra"`},
		{[]string{"migrate", "now"}, `migrate: unexpected argument "now"`},
		{[]string{"openapi", "-x"}, "openapi: flag provided but not defined"},
		{[]string{"keys"}, "keys: missing subcommand"},
		{[]string{"keys", "purge"}, `keys: unknown subcommand "purge"`},
		{[]string{"keys", "list", "-limit", "many"}, `keys list: invalid value "many" for flag -limit`},
		{[]string{"keys", "list", "-limit", "0"}, "keys list: -limit 0"},
		{[]string{"keys", "show"}, "keys show: missing the key's ID"},
		{[]string{"keys", "show", "abc"}, `keys show: key id "abc"`},
		{[]string{"keys", "complete", "1", "2"}, `keys complete: unexpected argument "2"`},
		{[]string{"keys", "reconcile", "-since", "0s"}, "keys reconcile: -since 0s"},
		{[]string{"keys", "reconcile", "-since", "yesterday"}, `keys reconcile: invalid value "yesterday" for flag -since`},
		{[]string{"book", "--from", "here"}, "book: --from must be LAT,LON"},
		{[]string{"book", "--to"}, "book: flag needs an argument: -to"},
		{[]string{"db"}, "db: missing subcommand"},
		{[]string{"db", "sideways"}, `db: unknown subcommand "sideways"`},
		{[]string{"fakestripe", "-port", "1"}, "fakestripe: flag provided but not defined: -port"},
		{[]string{"mailsink", "x"}, `mailsink: unexpected argument "x"`},
		{[]string{"healthcheck", "now"}, `healthcheck: unexpected argument "now"`},
		{[]string{"healthcheck", "-timeout", "0s"}, "healthcheck: -timeout 0s"},
	} {
		r := binrun.RunT(t, env, c.args...)
		require.Equal(t, 2, r.ExitCode, "%v: %s", c.args, r.Stderr)
		require.Empty(t, r.Stdout, c.args)
		require.Equal(t, 1, strings.Count(r.Stderr, "\n"), "%v: one line: %q", c.args, r.Stderr)
		require.True(t, strings.HasPrefix(r.Stderr, "atomicrides: "), "%v: %q", c.args, r.Stderr)
		require.Contains(t, r.Stderr, c.says, c.args)
	}
}
