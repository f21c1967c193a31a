package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/atomicrides/atomicrides/openapi/client"
)

// bookListMax bounds book list's --limit: what a terminal can show.
const bookListMax = 10_000

// bookList prints the rider's rides, newest first, following the list's
// cursors through the generated client until --limit rides are printed
// or none are left. The rider's API key comes from ATOMICRIDES_API_KEY,
// the server from ATOMICRIDES_URL.
func bookList(ctx context.Context, args []string, stdout io.Writer) error {
	cmd := newCommand("book list", "book list [--limit N] [--json]\n\nPrints the rider's rides, newest first: id, when booked, charge status, amount, refund.\nThe rider's API key comes from ATOMICRIDES_API_KEY, the server from ATOMICRIDES_URL\n(default http://127.0.0.1:8080).", stdout)
	limit := cmd.fs.Int("limit", 10, fmt.Sprintf("how many rides to print at most, 1 to %d (newest first)", bookListMax))
	asJSON := cmd.fs.Bool("json", false, "print the rides as a JSON array, as the API sends them")
	if err := cmd.parse(args, 0); err != nil {
		return err
	}
	if *limit < 1 || *limit > bookListMax {
		return usagef("book list: --limit must be 1 to %d; got %d", bookListMax, *limit)
	}
	cfg, err := bookConfigFromEnv()
	if err != nil {
		return err
	}
	if cfg.APIKey == "" {
		return errors.New("book list: set ATOMICRIDES_API_KEY to the rider's API key (PUT /users/{email} mints one)")
	}
	c, err := client.NewClient(cfg.URL, client.WithBearer(cfg.APIKey))
	if err != nil {
		return fmt.Errorf("book list: %w", err)
	}
	page := int64(min(*limit, 100))
	rides := []client.Ride{}
	for ride, err := range client.RideAll(ctx, c, client.RideListParams{Limit: &page}) {
		if err != nil {
			var le *client.ListError
			if errors.As(err, &le) {
				return fmt.Errorf("book list: %s", problemText(le.Status, le.Body))
			}
			return fmt.Errorf("book list: %w", err)
		}
		rides = append(rides, ride)
		if len(rides) == *limit {
			break
		}
	}
	if *asJSON {
		out, err := json.MarshalIndent(rides, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", out)
		return err
	}
	if len(rides) == 0 {
		_, err := fmt.Fprintln(stdout, "no rides")
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tBOOKED\tCHARGE\tAMOUNT\tREFUND")
	for _, r := range rides {
		charge := string(r.ChargeStatus)
		if r.DeclineCode != nil {
			charge += " (" + *r.DeclineCode + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d.%02d %s\t%s\n", r.ID, r.CreatedAt.UTC().Format(time.RFC3339), charge,
			r.AmountCents/100, r.AmountCents%100, r.Currency, r.RefundStatus)
	}
	return tw.Flush()
}
