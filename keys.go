package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/atomicrides/atomicrides/service"
)

const keysUsage = `keys list|show|complete|reconcile|events-replay ...

  keys list [-dead] [-limit N] [-json]   unfinished requests idle past COMPLETER_IDLE or past KEY_RETENTION;
                                         -dead: those whose completion was discarded after its last attempt
  keys show [-json] ID                   one key, its stored request and its completion job
  keys complete ID                       drive the request to completion now, as its client's retry would
  keys reconcile [-since 48h] [-json]    charges and refunds at Stripe of this deployment that no ride records,
                                         and rides recorded as charged that Stripe lacks; exit 1 when any
  keys events-replay [-since 72h] [-json]
                                         read Stripe's events since then again through the webhook inbox
                                         (after a restore or a failover that lost commits); the new ones are
                                         applied once by the serving processes' workers`

// errReconcileFindings is the error (exit status 1) of a reconciliation
// that found something for an operator to look at.
var errReconcileFindings = errors.New("reconciliation found orphans or missing charges (listed above)")

// keysCommand is the operators' view of idempotency keys. The command line
// is checked in full before the database is touched.
func keysCommand(ctx context.Context, args []string, out io.Writer, logger *slog.Logger) error {
	if len(args) == 0 {
		return usagef("keys: missing subcommand: list, show, complete, reconcile or events-replay (see atomicrides keys --help)")
	}
	sub := args[0]
	if isHelp(sub) {
		fmt.Fprintln(out, "usage: atomicrides "+keysUsage)
		return errHelpShown
	}
	var cmd *command
	var dead, asJSON *bool
	var limit *int
	var since *time.Duration
	var id int64
	switch sub {
	case "list":
		cmd = newCommand("keys list", "keys list [-dead] [-limit N] [-json]\n\nLists unfinished requests idle past COMPLETER_IDLE or past KEY_RETENTION.", out)
		dead = cmd.fs.Bool("dead", false, "list dead-lettered requests only: those whose completion was discarded after its last attempt")
		limit = cmd.fs.Int("limit", 100, "list at most this many")
		asJSON = cmd.fs.Bool("json", false, "print JSON")
		if err := cmd.parse(args[1:], 0); err != nil {
			return err
		}
		if *limit <= 0 {
			return usagef("keys list: -limit %d: want a positive number", *limit)
		}
	case "reconcile":
		cmd = newCommand("keys reconcile", "keys reconcile [-since 48h] [-json]\n\nLists the charges and refunds at Stripe of this deployment that no ride records, and the rides\nrecorded as charged that Stripe lacks; exits 1 when there is any.", out)
		since = cmd.fs.Duration("since", 48*time.Hour, "how far back to look")
		asJSON = cmd.fs.Bool("json", false, "print JSON")
		if err := cmd.parse(args[1:], 0); err != nil {
			return err
		}
		if *since <= 0 {
			return usagef("keys reconcile: -since %s: want a positive duration such as 48h", *since)
		}
	case "events-replay":
		cmd = newCommand("keys events-replay", "keys events-replay [-since 72h] [-json]\n\nReads Stripe's events since then (Stripe keeps 30 days) through the webhook inbox: events it\nlacks are recorded and applied once by the serving processes' workers; the others write nothing.\nRun it after restoring a backup or promoting a standby, with -since before the restore point.", out)
		since = cmd.fs.Duration("since", 72*time.Hour, "how far back to read")
		asJSON = cmd.fs.Bool("json", false, "print JSON")
		if err := cmd.parse(args[1:], 0); err != nil {
			return err
		}
		if *since <= 0 || *since > 30*24*time.Hour {
			return usagef("keys events-replay: -since %s: want a positive duration of at most 720h (Stripe keeps 30 days of events)", *since)
		}
	case "show", "complete":
		if sub == "show" {
			cmd = newCommand("keys show", "keys show [-json] ID\n\nShows one key, its stored request and its completion job.", out)
			asJSON = cmd.fs.Bool("json", false, "print JSON")
		} else {
			cmd = newCommand("keys complete", "keys complete ID\n\nDrives the request to completion now, as its client's retry would.", out)
		}
		if err := cmd.parse(args[1:], 1); err != nil {
			return err
		}
		if cmd.fs.NArg() != 1 {
			return usagef("keys %s: missing the key's ID (see atomicrides keys %s --help)", sub, sub)
		}
		var err error
		if id, err = strconv.ParseInt(cmd.fs.Arg(0), 10, 64); err != nil || id <= 0 {
			return usagef("keys %s: key id %q: want a positive integer", sub, cmd.fs.Arg(0))
		}
	default:
		return usagef("keys: unknown subcommand %q: want list, show, complete, reconcile or events-replay (see atomicrides keys --help)", sub)
	}

	// complete and reconcile reach Stripe: they refuse to run without its
	// configuration, before touching anything. None of them sends mail.
	needs := backends{stripe: sub == "complete" || sub == "reconcile" || sub == "events-replay"}
	cfg, err := configFromEnv(needs)
	if err != nil {
		return err
	}
	pool, err := connect(ctx, cfg, logger, false, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	p, _, stop, err := newService(pool, pool, cfg, prometheus.NewRegistry(), logger, needs)
	if err != nil {
		return err
	}
	defer stop()
	svc := p.svc

	switch sub {
	case "events-replay":
		rep, err := svc.InboxReplay(ctx, service.InboxSourceStripe, time.Now().Add(-*since))
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(out, rep)
		}
		fmt.Fprintf(out, "events since %s: %d listed, %d new (queued to be applied once), %d already received\n",
			rep.Since.Format(time.RFC3339), rep.Listed, rep.Recorded, rep.Duplicates)
		return nil
	case "reconcile":
		rep, err := svc.Reconcile(ctx, *since)
		if err != nil {
			return err
		}
		if *asJSON {
			if err := printJSON(out, rep); err != nil {
				return err
			}
		} else {
			printReconcile(out, rep)
		}
		if !rep.Clean() {
			return errReconcileFindings
		}
		return nil
	case "list":
		var keys []*service.KeyInfo
		if *dead {
			keys, err = svc.KeysDead(ctx, *limit)
		} else {
			keys, err = svc.KeysStuck(ctx, *limit)
		}
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(out, keys)
		}
		printKeys(out, keys)
		return nil
	case "complete":
		resp, err := svc.KeyComplete(ctx, id)
		if err != nil {
			return fmt.Errorf("key %d not completed: %w", id, err)
		}
		verb := "finished"
		if resp.Replayed {
			verb = "was already finished"
		}
		fmt.Fprintf(out, "key %d %s: %d %s\n", id, verb, resp.Status, resp.Body)
		return nil
	default: // show
		k, err := svc.KeyGet(ctx, id)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(out, k)
		}
		printKey(out, k)
		return nil
	}
}

func printKeys(out io.Writer, keys []*service.KeyInfo) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tUSER\tFLOW\tPOINT\tCREATED\tLAST RUN\tLEASED\tCOMPLETION")
	for _, k := range keys {
		leased := "-"
		if k.LeasedUntil != nil {
			leased = "until " + k.LeasedUntil.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.UserID, k.Flow, k.RecoveryPoint,
			k.CreatedAt.Format(time.RFC3339), k.LastRunAt.Format(time.RFC3339), leased, completion(k.Completion))
	}
	_ = tw.Flush()
	fmt.Fprintf(out, "%d keys\n", len(keys))
}

func printKey(out io.Writer, k *service.KeyInfo) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{name}, args...)...)
	}
	row("id", "%d", k.ID)
	row("user", "%d", k.UserID)
	row("idempotency key", "%s", k.IdempotencyKey)
	row("request", "%s %s %s", k.Method, k.Path, k.Params)
	row("flow", "%s", k.Flow)
	row("recovery point", "%s", k.RecoveryPoint)
	row("created", "%s", k.CreatedAt.Format(time.RFC3339))
	row("last run", "%s", k.LastRunAt.Format(time.RFC3339))
	if k.LeasedUntil != nil {
		row("leased until", "%s", k.LeasedUntil.Format(time.RFC3339))
	}
	if k.ResponseCode != nil {
		row("response", "%d", *k.ResponseCode)
	}
	for _, a := range k.Attempts {
		if a.Reason != "" {
			row("attempt "+strconv.Itoa(a.Attempt), "%s (moved on: %s)", a.Processor, a.Reason)
		} else {
			row("attempt "+strconv.Itoa(a.Attempt), "%s", a.Processor)
		}
	}
	if r := k.Ride; r != nil {
		if r.WaitsUntil != nil {
			row("ride", "%d %s: waits for its rider until %s; then %s", r.ID, r.ChargeStatus, r.WaitsUntil.Format(time.RFC3339), completion(r.Expiry))
		} else {
			row("ride", "%d %s", r.ID, r.ChargeStatus)
		}
	}
	row("completion", "%s", completion(k.Completion))
	if k.Completion != nil && k.Completion.LastError != "" {
		row("last error", "%s", k.Completion.LastError)
	}
	_ = tw.Flush()
}

func completion(j *service.KeyCompletionJob) string {
	if j == nil {
		return "-"
	}
	return fmt.Sprintf("job %d %s (attempt %d/%d)", j.JobID, j.State, j.Attempt, j.MaxAttempts)
}

func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printReconcile(out io.Writer, r *service.ReconcileReport) {
	fmt.Fprintf(out, "namespace %s, since %s: %d charges, %d refunds of this deployment at Stripe\n",
		r.Namespace, r.Since.Format(time.RFC3339), r.Charges, r.Refunds)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tID\tCHARGE\tAMOUNT\tCREATED\tRIDER\tRIDE")
	for _, o := range r.OrphanCharges {
		fmt.Fprintf(tw, "orphan charge\t%s\t-\t%d\t%s\t%s\t-\n", o.ID, o.AmountCents, o.Created.Format(time.RFC3339), o.Rider)
	}
	for _, o := range r.OrphanRefunds {
		fmt.Fprintf(tw, "orphan refund\t%s\t%s\t%d\t%s\t%s\t-\n", o.ID, o.ChargeID, o.AmountCents, o.Created.Format(time.RFC3339), o.Rider)
	}
	for _, m := range r.MissingCharges {
		fmt.Fprintf(tw, "missing charge\t-\t%s\t-\t-\t-\t%d\n", m.ChargeID, m.RideID)
	}
	for _, o := range r.OrphanHolds {
		fmt.Fprintf(tw, "orphan hold\t%s\t-\t%d\t%s\t%s\t-\n", o.ID, o.AmountCents, o.Created.Format(time.RFC3339), o.Rider)
	}
	for _, d := range r.DoubleCharges {
		fmt.Fprintf(tw, "double charge at %s (ride charged at %s)\t%s\t%s\t-\t-\t-\t%d\n",
			d.OtherProcessor, d.RecordedProcessor, d.OtherChargeID, d.RecordedChargeID, d.RideID)
	}
	_ = tw.Flush()
	fmt.Fprintf(out, "%d orphan charges, %d orphan refunds, %d missing charges, %d orphan holds\n",
		len(r.OrphanCharges), len(r.OrphanRefunds), len(r.MissingCharges), len(r.OrphanHolds))
	if len(r.DoubleCharges) > 0 || len(r.Unlisted) > 0 || len(r.Notified) > 0 {
		fmt.Fprintf(out, "%d rides charged at two processors; listed: %s; from notifications: %s; not listable (see docs/processors.md): %s\n",
			len(r.DoubleCharges), strings.Join(r.Processors, ","), strings.Join(r.Notified, ","), strings.Join(r.Unlisted, ","))
	}
}
