package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/atomicrides/atomicrides/service/settlements"
	"github.com/prometheus/client_golang/prometheus"
)

const settlementsUsage = `settlements list|show ...

  settlements list [-limit N] [-json]   the bank's settlement files, newest first, and every discrepancy:
                                        lines naming no charge of ours, lines differing from ours, and
                                        charges or refunds unsettled past SETTLEMENT_MAX_AGE; exit 1 when
                                        any discrepancy or flagged file needs an operator
  settlements show [-json] ID           one file version: its lines, their matches, its quarantined lines`

// errSettlementFindings is the error (exit status 1) of a settlements list
// that found something for an operator.
var errSettlementFindings = errors.New("settlements need an operator (listed above)")

// settlementsCommand is the operators' view of the bank's settlement files.
// The command line is checked in full before the database is touched.
func settlementsCommand(ctx context.Context, args []string, out io.Writer, logger *slog.Logger) error {
	if len(args) == 0 {
		return usagef("settlements: missing subcommand: list or show (see atomicrides settlements --help)")
	}
	sub := args[0]
	if isHelp(sub) {
		fmt.Fprintln(out, "usage: atomicrides "+settlementsUsage)
		return errHelpShown
	}
	var cmd *command
	var asJSON *bool
	var limit *int
	var id int64
	switch sub {
	case "list":
		cmd = newCommand("settlements list", "settlements list [-limit N] [-json]\n\nLists the settlement files, newest first, and every discrepancy; exits 1 when any needs an operator.", out)
		limit = cmd.fs.Int("limit", 50, "list at most this many files and this many discrepancies")
		asJSON = cmd.fs.Bool("json", false, "print JSON")
		if err := cmd.parse(args[1:], 0); err != nil {
			return err
		}
		if *limit <= 0 {
			return usagef("settlements list: -limit %d: want a positive number", *limit)
		}
	case "show":
		cmd = newCommand("settlements show", "settlements show [-json] ID\n\nShows one settlement file version: its lines, their matches and its quarantined lines.", out)
		asJSON = cmd.fs.Bool("json", false, "print JSON")
		if err := cmd.parse(args[1:], 1); err != nil {
			return err
		}
		if cmd.fs.NArg() != 1 {
			return usagef("settlements show: missing the file's ID (see atomicrides settlements show --help)")
		}
		var err error
		if id, err = strconv.ParseInt(cmd.fs.Arg(0), 10, 64); err != nil || id <= 0 {
			return usagef("settlements show: file id %q: want a positive integer", cmd.fs.Arg(0))
		}
	default:
		return usagef("settlements: unknown subcommand %q: want list or show (see atomicrides settlements --help)", sub)
	}

	cfg, err := configFromEnv(backends{})
	if err != nil {
		return err
	}
	pool, err := connect(ctx, cfg, logger, false, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	p, _, stop, err := newService(pool, pool, cfg, prometheus.NewRegistry(), logger, backends{})
	if err != nil {
		return err
	}
	defer stop()
	st := p.settlements

	if sub == "show" {
		d, err := st.FileShow(ctx, id)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(out, d)
		}
		printSettlementFile(out, d)
		return nil
	}
	rep, err := st.Check(ctx, *limit)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := printJSON(out, rep); err != nil {
			return err
		}
	} else {
		printSettlements(out, rep)
	}
	if !rep.Clean() {
		return errSettlementFindings
	}
	return nil
}

func printSettlements(out io.Writer, rep *settlements.Report) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tVERSION\tRECEIVED\tSTATUS\tCURSOR\tAPPLIED\tDUPLICATE\tQUARANTINED\tFLAG")
	for _, f := range rep.Files {
		flag := "-"
		if f.Flagged {
			flag = f.FlagReason
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", f.ID, f.Name, f.Version,
			f.Received.Format(time.RFC3339), f.Status, f.Cursor, f.Applied, f.Duplicate, f.Quarantined, flag)
	}
	_ = tw.Flush()
	fmt.Fprintf(out, "%d files, %d flagged\n\n", len(rep.Files), rep.Flagged)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tTYPE\tREFERENCE\tRIDE\tGROSS\tFILE\tLINE\tDETAIL")
	for _, d := range rep.Discrepancies {
		ride, file, line := "-", "-", "-"
		if d.RideID != nil {
			ride = strconv.FormatInt(*d.RideID, 10)
		}
		if d.File != "" {
			file, line = fmt.Sprintf("%s#%d", d.File, d.FileVersion), strconv.Itoa(d.Line)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d %s\t%s\t%s\t%s\n", d.Kind, d.Type, d.ProcessorReference, ride,
			d.GrossCents, d.Currency, file, line, d.Detail)
	}
	_ = tw.Flush()
	fmt.Fprintf(out, "%d discrepancies (not settled: older than %s)\n", len(rep.Discrepancies), rep.MaxAge)
}

func printSettlementFile(out io.Writer, d *settlements.FileDetail) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{name}, args...)...)
	}
	row("id", "%d", d.ID)
	row("name", "%s (version %d, %d bytes)", d.Name, d.Version, d.SizeBytes)
	row("received", "%s", d.Received.Format(time.RFC3339))
	row("status", "%s", d.Status)
	if d.Problem != "" {
		row("problem", "%s", d.Problem)
	}
	row("cursor", "line %d", d.Cursor)
	row("lines", "%d applied, %d duplicate, %d quarantined", d.Applied, d.Duplicate, d.Quarantined)
	if d.Flagged {
		row("flagged", "%s", d.FlagReason)
	}
	_ = tw.Flush()
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LINE\tTYPE\tREFERENCE\tGROSS\tFEE\tNET\tPAYOUT\tMATCH\tRIDE")
	for _, l := range d.Lines {
		ride := "-"
		if l.RideID != nil {
			ride = strconv.FormatInt(*l.RideID, 10)
		}
		match := l.Match
		if l.Mismatch != "" {
			match += " (" + l.Mismatch + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d %s\t%s\t%s\t%s\n", l.Line, l.Type, l.ProcessorReference,
			l.GrossCents, l.FeeCents, l.NetCents, l.Currency, l.PayoutID, match, ride)
	}
	_ = tw.Flush()
	if len(d.QuarantinedLines) > 0 {
		fmt.Fprintln(out)
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "QUARANTINED LINE\tREASON\tRAW")
		for _, q := range d.QuarantinedLines {
			fmt.Fprintf(tw, "%d\t%s\t%s\n", q.Line, q.Reason, q.Raw)
		}
		_ = tw.Flush()
	}
}
