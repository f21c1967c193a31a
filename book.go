package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/atomicrides/atomicrides/openapi/client"
)

// bookOutput is what `book` prints on success: the ride as the server sent
// it, and how the booking went.
type bookOutput struct {
	Ride           json.RawMessage `json:"ride"`
	IdempotencyKey string          `json:"idempotency_key"`
	Replayed       bool            `json:"replayed"`
	Attempts       int             `json:"attempts"`
}

// book books one ride through the generated client with safe retries: one
// idempotency key (--key, or a fresh one) for every attempt. The rider's API
// key comes from ATOMICRIDES_API_KEY, the server from ATOMICRIDES_URL.
func book(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "list" {
		return bookList(ctx, args[1:], stdout)
	}
	cmd := newCommand("book", "book --from LAT,LON --to LAT,LON [--key KEY]\n       book list [--limit N] [--json]\n\nBooks one ride through the API with safe retries (one idempotency key for every attempt).\nThe rider's API key comes from ATOMICRIDES_API_KEY, the server from ATOMICRIDES_URL\n(default http://127.0.0.1:8080).", stdout)
	from := cmd.fs.String("from", "", "origin as LAT,LON, e.g. 37.7749,-122.4194 (required)")
	to := cmd.fs.String("to", "", "destination as LAT,LON (required)")
	key := cmd.fs.String("key", "", "idempotency key: pass the key of an earlier attempt to retry that booking (default: a fresh key)")
	noWait := cmd.fs.Bool("no-wait", false, "when the rider's bank asks for authentication (202), print the waiting ride and stop instead of waiting for its outcome")
	if err := cmd.parse(args, 0); err != nil {
		return err
	}
	var body client.RideCreateBody
	var err error
	if body.OriginLat, body.OriginLon, err = parseLatLon("--from", *from); err != nil {
		return err
	}
	if body.TargetLat, body.TargetLon, err = parseLatLon("--to", *to); err != nil {
		return err
	}
	cfg, err := bookConfigFromEnv()
	if err != nil {
		return err
	}
	if cfg.APIKey == "" {
		return errors.New("book: set ATOMICRIDES_API_KEY to the rider's API key (PUT /users/{email} mints one)")
	}
	c, err := client.NewClient(cfg.URL, client.WithBearer(cfg.APIKey))
	if err != nil {
		return fmt.Errorf("book: %w", err)
	}
	if *key == "" {
		*key = client.NewIdempotencyKey()
	}
	r := &client.Retrier{Client: c, Policy: client.Policy{
		OnRetry: func(attempt, status int, err error, wait time.Duration) {
			cause := strconv.Itoa(status)
			if status == 0 {
				cause = err.Error()
			}
			fmt.Fprintf(stderr, "attempt %d: %s; retrying in %s with the same key\n", attempt, cause, wait.Round(time.Millisecond))
		},
	}}
	res, err := r.RideCreate(ctx, *key, body)
	if err != nil {
		return fmt.Errorf("book: no answer (retry this booking with --key %s): %w", *key, err)
	}
	outcome, ride, err := res.Reply.Outcome()
	if err != nil || outcome == client.RideOutcomeDeclined {
		return fmt.Errorf("book: ride not booked: %s (idempotency key %s)", problemText(res.StatusCode, res.Reply.Body), res.Key)
	}
	rideJSON, status := json.RawMessage(res.Reply.Body), string(ride.ChargeStatus)
	if outcome == client.RideOutcomeRequiresAction && !*noWait {
		if rideJSON, status, err = awaitAction(ctx, c, ride, stderr); err != nil {
			return fmt.Errorf("book: %w (idempotency key %s)", err, res.Key)
		}
	}
	out, err := json.MarshalIndent(bookOutput{Ride: rideJSON, IdempotencyKey: res.Key, Replayed: res.Replayed, Attempts: res.Attempts}, "", "  ")
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", out); err != nil {
		return err
	}
	if status == string(client.RideDetailChargeStatusDeclined) || status == string(client.RideDetailChargeStatusExpired) {
		return fmt.Errorf("book: ride %d %s: nothing was charged (idempotency key %s)", ride.ID, status, res.Key)
	}
	return nil
}

// parseLatLon reads "LAT,LON"; the server checks the ranges.
func parseLatLon(flagName, v string) (lat, lon float64, err error) {
	latS, lonS, ok := strings.Cut(v, ",")
	if ok {
		lat, err = strconv.ParseFloat(strings.TrimSpace(latS), 64)
		if err == nil {
			lon, err = strconv.ParseFloat(strings.TrimSpace(lonS), 64)
		}
	}
	if !ok || err != nil {
		return 0, 0, usagef("book: %s must be LAT,LON in degrees, e.g. 37.7749,-122.4194; got %q", flagName, v)
	}
	return lat, lon, nil
}

// problemText summarises a problem+json answer.
func problemText(status int, body []byte) string {
	var p struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
		Errors []struct {
			Location string `json:"location"`
			Message  string `json:"message"`
		} `json:"errors"`
	}
	text := strconv.Itoa(status)
	if json.Unmarshal(body, &p) != nil {
		return text
	}
	if p.Title != "" {
		text += " " + p.Title
	}
	if p.Detail != "" {
		text += ": " + p.Detail
	}
	for _, e := range p.Errors {
		text += fmt.Sprintf(" [%s: %s]", e.Location, e.Message)
	}
	return text
}

// awaitAction tells the rider where their bank asks them to authenticate
// the payment of a ride booked with 202, then reads the ride until its
// charge is decided, and returns it as GET /rides/{id} shows it, with its
// charge status.
func awaitAction(ctx context.Context, c client.ClientInterface, ride *client.Ride, stderr io.Writer) (json.RawMessage, string, error) {
	if ride.NextAction == nil {
		return nil, "", fmt.Errorf("ride %d waits for its rider without an action", ride.ID)
	}
	fmt.Fprintf(stderr, "ride %d: your bank asks you to authenticate this payment: open\n  %s\nbefore %s; waiting for the ride's outcome...\n",
		ride.ID, ride.NextAction.RedirectURL, ride.NextAction.ExpiresAt.UTC().Format(time.RFC3339))
	// The service cancels the payment at its deadline: the outcome comes by then.
	ctx, cancel := context.WithDeadline(ctx, ride.NextAction.ExpiresAt.Add(time.Minute))
	defer cancel()
	final, err := client.RideAwait(ctx, c, ride.ID, time.Second)
	if err != nil {
		return nil, "", fmt.Errorf("no outcome for ride %d: %w", ride.ID, err)
	}
	fmt.Fprintf(stderr, "ride %d: %s\n", ride.ID, final.ChargeStatus)
	b, err := json.Marshal(final)
	if err != nil {
		return nil, "", err
	}
	return b, string(final.ChargeStatus), nil
}
