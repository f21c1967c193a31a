package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/atomicrides/atomicrides/openapi/client"
	"github.com/atomicrides/atomicrides/service"
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
	if len(args) > 0 {
		switch args[0] {
		case "list":
			return bookList(ctx, args[1:], stdout)
		case "complete":
			return bookComplete(ctx, args[1:], stdout, stderr)
		case "cancel":
			return bookCancel(ctx, args[1:], stdout, stderr)
		}
	}
	cmd := newCommand("book", "book --from LAT,LON --to LAT,LON [--key KEY]\n       book list [--limit N] [--json]\n       book complete RIDE-ID FARE-CENTS [--key KEY] [--currency usd] [--dispatch-token TOKEN]\n       book cancel RIDE-ID [--key KEY] [--dispatch]\n\nBooks one ride through the API with safe retries (one idempotency key for every attempt).\nThe rider's API key comes from ATOMICRIDES_API_KEY, the server from ATOMICRIDES_URL\n(default http://127.0.0.1:8080). complete and cancel act on a trip (CAPTURE=trip): see\natomicrides book complete --help and atomicrides book cancel --help.", stdout)
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
	r := &client.Retrier{Client: c, Policy: client.Policy{OnRetry: retryNotice(stderr)}}
	res, err := r.RideCreate(ctx, *key, body)
	if err != nil {
		return fmt.Errorf("book: no answer (retry this booking with --key %s): %w", *key, err)
	}
	outcome, ride, err := res.Reply.Outcome()
	if err != nil || ride == nil { // declined, or a balance due (the problem names the ride that owes it)
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

// retryNotice tells stderr of each retry: the attempt that failed, its
// status or error, and the wait before the next attempt under the same key.
func retryNotice(stderr io.Writer) func(attempt, status int, err error, wait time.Duration) {
	return func(attempt, status int, err error, wait time.Duration) {
		cause := strconv.Itoa(status)
		if status == 0 {
			cause = err.Error()
		}
		fmt.Fprintf(stderr, "attempt %d: %s; retrying in %s with the same key\n", attempt, cause, wait.Round(time.Millisecond))
	}
}

// tripOutput is what `book complete` and `book cancel` print on success:
// the ride as the server sent it, the answer's status (201: this request
// did it; 200: a request under another key had; 202: the processor
// confirms the capture later), and how the request went.
type tripOutput struct {
	Ride           json.RawMessage `json:"ride"`
	Status         int             `json:"status"`
	IdempotencyKey string          `json:"idempotency_key"`
	Replayed       bool            `json:"replayed"`
	Attempts       int             `json:"attempts"`
}

// bookComplete completes a trip with its final fare, as the dispatch side,
// through the generated client with safe retries: one idempotency key
// (--key, or a fresh one) for every attempt. The dispatch side's token
// comes from --dispatch-token or DISPATCH_TOKEN, the server from
// ATOMICRIDES_URL.
func bookComplete(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := newCommand("book complete", "book complete RIDE-ID FARE-CENTS [--key KEY] [--currency usd] [--dispatch-token TOKEN]\n\n"+
		"Completes a trip (a ride booked under CAPTURE=trip, its fare held) with its final fare in cents, as the\n"+
		"dispatch side, with safe retries (one idempotency key for every attempt): the fare is captured from the\n"+
		"hold once, whatever the keys. The dispatch side's token comes from DISPATCH_TOKEN (or --dispatch-token),\n"+
		"the server from ATOMICRIDES_URL (default http://127.0.0.1:8080).", stdout)
	key := cmd.fs.String("key", "", "idempotency key: pass the key of an earlier attempt to retry that completion (default: a fresh key)")
	currency := cmd.fs.String("currency", "usd", "the ride's currency (ISO 4217, lower case)")
	token := cmd.fs.String("dispatch-token", "", "the dispatch side's token (default: $DISPATCH_TOKEN)")
	pos, err := cmd.parseArgs(args, "RIDE-ID", "FARE-CENTS")
	if err != nil {
		return err
	}
	rideID, err := parseRideID("book complete", pos[0])
	if err != nil {
		return err
	}
	fare, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || fare <= 0 {
		return usagef("book complete: fare %q: want a positive whole number of cents, e.g. 1850 for 18.50", pos[1])
	}
	if !service.IsCurrency(*currency) {
		return usagef("book complete: --currency %q: want a three-letter ISO 4217 code in lower case, e.g. usd", *currency)
	}
	if *token == "" {
		*token = os.Getenv("DISPATCH_TOKEN")
	}
	if *token == "" {
		return errors.New("book complete: set DISPATCH_TOKEN to the dispatch side's token, or pass --dispatch-token")
	}
	r, err := tripRetrier("book complete", *token, stderr)
	if err != nil {
		return err
	}
	if *key == "" {
		*key = client.NewIdempotencyKey()
	}
	res, err := r.RideComplete(ctx, *key, rideID, client.RideCompleteInputBody{FareCents: fare, Currency: *currency})
	if err != nil {
		return fmt.Errorf("book complete: no answer (retry this completion with --key %s): %w", *key, err)
	}
	ride, err := res.Reply.Ride()
	if err != nil {
		return fmt.Errorf("book complete: ride %d not completed: %s (idempotency key %s)", rideID, problemText(res.StatusCode, res.Reply.Body), res.Key)
	}
	if err := printTrip(stdout, res.Reply.Body, res.StatusCode, res.Key, res.Replayed, res.Attempts); err != nil {
		return err
	}
	switch {
	case ride.ChargeStatus == client.RideChargeStatusCaptureFailed:
		return fmt.Errorf("book complete: ride %d capture_failed (%s): nothing was captured (idempotency key %s)", ride.ID, deref(ride.CaptureFailure), res.Key)
	case ride.ChargeStatus == client.RideChargeStatusCapturing:
		fmt.Fprintf(stderr, "ride %d: capturing: the processor confirms the capture later (GET /rides/%d)\n", ride.ID, ride.ID)
	}
	if ride.BalanceDueCents > 0 {
		fmt.Fprintf(stderr, "ride %d: the payment of the fare above the hold failed: the rider owes %d.%02d %s and books nothing until it is paid (POST /rides/%d/balance)\n",
			ride.ID, ride.BalanceDueCents/100, ride.BalanceDueCents%100, strings.ToUpper(ride.Currency), ride.ID)
	}
	return nil
}

// bookCancel cancels a trip and releases its hold, through the generated
// client with safe retries: one idempotency key (--key, or a fresh one) for
// every attempt. The rider's API key comes from ATOMICRIDES_API_KEY; with
// --dispatch (or --dispatch-token) the dispatch side's token from
// DISPATCH_TOKEN cancels any ride. The server comes from ATOMICRIDES_URL.
func bookCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := newCommand("book cancel", "book cancel RIDE-ID [--key KEY] [--dispatch] [--dispatch-token TOKEN]\n\n"+
		"Cancels a trip (a ride booked under CAPTURE=trip) before it is completed and releases its hold, with safe\n"+
		"retries (one idempotency key for every attempt). The rider cancels their own ride with their API key from\n"+
		"ATOMICRIDES_API_KEY; with --dispatch the dispatch side cancels any ride with its token from DISPATCH_TOKEN\n"+
		"(or --dispatch-token). The server comes from ATOMICRIDES_URL (default http://127.0.0.1:8080).", stdout)
	key := cmd.fs.String("key", "", "idempotency key: pass the key of an earlier attempt to retry that cancellation (default: a fresh key)")
	dispatch := cmd.fs.Bool("dispatch", false, "cancel as the dispatch side, with DISPATCH_TOKEN, rather than as the rider")
	token := cmd.fs.String("dispatch-token", "", "the dispatch side's token; implies --dispatch (default: $DISPATCH_TOKEN)")
	pos, err := cmd.parseArgs(args, "RIDE-ID")
	if err != nil {
		return err
	}
	rideID, err := parseRideID("book cancel", pos[0])
	if err != nil {
		return err
	}
	credential := *token
	switch {
	case credential != "":
	case *dispatch:
		if credential = os.Getenv("DISPATCH_TOKEN"); credential == "" {
			return errors.New("book cancel: --dispatch: set DISPATCH_TOKEN to the dispatch side's token, or pass --dispatch-token")
		}
	default:
		cfg, err := bookConfigFromEnv()
		if err != nil {
			return err
		}
		if credential = cfg.APIKey; credential == "" {
			return errors.New("book cancel: set ATOMICRIDES_API_KEY to the rider's API key (PUT /users/{email} mints one), or cancel as the dispatch side with --dispatch")
		}
	}
	r, err := tripRetrier("book cancel", credential, stderr)
	if err != nil {
		return err
	}
	if *key == "" {
		*key = client.NewIdempotencyKey()
	}
	res, err := r.RideCancel(ctx, *key, rideID)
	if err != nil {
		return fmt.Errorf("book cancel: no answer (retry this cancellation with --key %s): %w", *key, err)
	}
	if _, err := res.Reply.Ride(); err != nil {
		return fmt.Errorf("book cancel: ride %d not cancelled: %s (idempotency key %s)", rideID, problemText(res.StatusCode, res.Reply.Body), res.Key)
	}
	return printTrip(stdout, res.Reply.Body, res.StatusCode, res.Key, res.Replayed, res.Attempts)
}

// tripRetrier is the retrier of `book complete` and `book cancel`:
// authenticated with token, at ATOMICRIDES_URL, telling stderr of its
// retries.
func tripRetrier(name, token string, stderr io.Writer) (*client.Retrier, error) {
	cfg, err := bookConfigFromEnv()
	if err != nil {
		return nil, err
	}
	c, err := client.NewClient(cfg.URL, client.WithBearer(token))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &client.Retrier{Client: c, Policy: client.Policy{OnRetry: retryNotice(stderr)}}, nil
}

// printTrip prints a trip action's final answer as tripOutput.
func printTrip(stdout io.Writer, ride []byte, status int, key string, replayed bool, attempts int) error {
	out, err := json.MarshalIndent(tripOutput{Ride: ride, Status: status, IdempotencyKey: key, Replayed: replayed, Attempts: attempts}, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", out)
	return err
}

// parseRideID reads a ride's id, a positive integer.
func parseRideID(name, v string) (int64, error) {
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id <= 0 {
		return 0, usagef("%s: ride id %q: want a positive integer, e.g. 5351843670591273", name, v)
	}
	return id, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
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
