package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// commandSummaries list the binary's commands, in the order help shows them.
var commandSummaries = []struct{ name, summary string }{
	{"serve", "run the HTTP API and the River workers (the default command; -dev: built-in fakes)"},
	{"migrate", "apply pending migrations (the service's and River's)"},
	{"openapi", "print the OpenAPI spec (YAML)"},
	{"keys", "list, show and complete stuck requests; reconcile with Stripe (operators)"},
	{"settlements", "list the bank's settlement files and discrepancies; show one file (operators)"},
	{"book", "book, list, complete or cancel rides through the API (client side)"},
	{"fakestripe", "serve the built-in fake Stripe on its own address"},
	{"fakeadyen", "serve the built-in fake Adyen on its own address"},
	{"mailsink", "serve an SMTP server that keeps what it receives"},
	{"healthcheck", "exit 0 when the instance on ADDR is ready (GET /readyz); the image's HEALTHCHECK"},
	{"db", "manage the throwaway development PostgreSQL: up, down, url"},
	{"help", "show this help, or a command's usage: help COMMAND"},
}

// printMainUsage writes the binary's usage: its commands.
func printMainUsage(w io.Writer) {
	fmt.Fprintln(w, "Atomic Rides books rides and charges riders exactly once.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "usage: atomicrides [COMMAND] [ARGUMENTS]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commandSummaries {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'atomicrides COMMAND --help' for a command's usage. Configuration comes")
	fmt.Fprintln(w, "from the environment (DATABASE_URL, ADDR, ADMIN_TOKEN, ...): see docs/operations.md.")
}

// errHelpShown means that the usage asked for (--help, -h, help) was printed
// to stdout: the process exits 0, having done nothing else.
var errHelpShown = errors.New("help shown")

// usageError is a command line the binary cannot run: an unknown command, a
// bad flag, a missing or malformed argument. The process prints it as one
// line on stderr and exits 2, as command-line tools do.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// usagef returns a usageError; the message should name the command.
func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// command is the flag set and usage line of one command.
type command struct {
	fs     *flag.FlagSet
	usage  string
	stdout io.Writer
}

// newCommand returns the flags of the command name, whose usage line
// (without "usage: atomicrides ") is usage. Flag errors are not printed by
// the flag package: parse returns them as usage errors.
func newCommand(name, usage string, stdout io.Writer) *command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &command{fs: fs, usage: usage, stdout: stdout}
}

// parse parses args. --help prints the usage and the flags to stdout and
// returns errHelpShown; a bad flag, or more than maxArgs arguments after the
// flags, is a usage error.
func (c *command) parse(args []string, maxArgs int) error {
	err := c.fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		c.printUsage()
		return errHelpShown
	}
	if err != nil {
		return usagef("%s: %v (see atomicrides %s --help)", c.fs.Name(), err, c.fs.Name())
	}
	if c.fs.NArg() > maxArgs {
		return usagef("%s: unexpected argument %q (see atomicrides %s --help)", c.fs.Name(), c.fs.Arg(maxArgs), c.fs.Name())
	}
	return nil
}

// parseArgs parses args, whose flags may come before, between or after
// the command's positional arguments, and returns those: exactly one for
// each of names (as the usage calls them). "--" ends the flags, and an
// argument that reads as a negative number is an argument, not a flag. A
// missing or unexpected argument is a usage error naming it.
func (c *command) parseArgs(args []string, names ...string) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		if _, err := strconv.ParseFloat(args[0], 64); err == nil && strings.HasPrefix(args[0], "-") {
			pos, args = append(pos, args[0]), args[1:]
			continue
		}
		if err := c.parse(args, len(args)); err != nil {
			return nil, err
		}
		rest := c.fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	name := c.fs.Name()
	if len(pos) < len(names) {
		return nil, usagef("%s: missing %s (see atomicrides %s --help)", name, names[len(pos)], name)
	}
	if len(pos) > len(names) {
		return nil, usagef("%s: unexpected argument %q (see atomicrides %s --help)", name, pos[len(names)], name)
	}
	return pos, nil
}

func (c *command) printUsage() {
	fmt.Fprintf(c.stdout, "usage: atomicrides %s\n", c.usage)
	hasFlags := false
	c.fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintln(c.stdout, "\nflags:")
		c.fs.SetOutput(c.stdout)
		c.fs.PrintDefaults()
		c.fs.SetOutput(io.Discard)
	}
}

// oneLine makes msg fit on one line.
func oneLine(msg string) string {
	return strings.Join(strings.Fields(msg), " ")
}
