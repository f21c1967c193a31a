package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/atomicrides/atomicrides/service"
)

const keysUsage = `usage:
  keys list [-dead] [-limit N] [-json]   unfinished requests idle past COMPLETER_IDLE or past KEY_RETENTION;
                                         -dead: those whose completion was discarded after its last attempt
  keys show [-json] ID                   one key, its stored request and its completion job
  keys complete ID                       drive the request to completion now, as its client's retry would`

// keysCommand is the operators' view of idempotency keys.
func keysCommand(ctx context.Context, args []string, out io.Writer, logger *slog.Logger) error {
	if len(args) == 0 {
		return errors.New(keysUsage)
	}
	pool, err := connect(ctx, logger, false, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	svc, stop, err := newService(pool, prometheus.NewRegistry(), logger)
	if err != nil {
		return err
	}
	defer stop()

	fs := flag.NewFlagSet("keys "+args[0], flag.ContinueOnError)
	fs.SetOutput(out)
	dead := fs.Bool("dead", false, "list dead-lettered requests only")
	limit := fs.Int("limit", 100, "list at most this many")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
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
	case "show", "complete":
		if fs.NArg() != 1 {
			return errors.New(keysUsage)
		}
		id, err := strconv.ParseInt(fs.Arg(0), 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("key id %q: want a positive integer", fs.Arg(0))
		}
		if args[0] == "complete" {
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
		}
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
	return errors.New(keysUsage)
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
