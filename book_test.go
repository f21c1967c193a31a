package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/openapi"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
	"github.com/atomicrides/atomicrides/service/payments"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// bookRun is one run of `atomicrides book`.
type bookRun struct {
	exit           int
	stdout, stderr string
}

// runBook runs `book` with args, env added to the test's environment.
func runBook(t *testing.T, env []string, args ...string) bookRun {
	t.Helper()
	res, err := binrun.Cmd{Bin: binrun.Build(t), Args: append([]string{"book"}, args...), Env: env, Dir: t.TempDir()}.Run(context.Background())
	require.NoError(t, err, "run book")
	return bookRun{exit: res.ExitCode, stdout: res.Stdout, stderr: res.Stderr}
}

// TestBookCommand runs the real binary's `book` against the real server: the
// first charge attempt fails at Stripe, the command retries with its one key,
// and the rider is charged once; `--key` with that key replays the booking.
func TestBookCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := testkit.NewStripe(t)
	pool := dbtest.New(t)
	svc, err := service.New(service.Config{Pool: pool, Payments: payments.New(payments.Config{
		APIBase: fake.URL, SecretKey: "sk_test_book", MaxNetworkRetries: payments.NoRetries,
	})})
	require.NoError(t, err)
	acc := testkit.NewAccounts(t, svc, nil)
	srv := httptest.NewServer(testkit.Conform(t, openapi.NewHandler(openapi.Config{Service: svc, Accounts: acc, Logger: slog.New(slog.DiscardHandler)})))
	t.Cleanup(srv.Close)
	rider, err := acc.UserUpsert(ctx, accounts.UserUpsertParams{Email: "cli@example.com"})
	require.NoError(t, err)
	// book, a client, reads only its own variables: a server's, even
	// invalid, do not stand in its way.
	env := []string{"ATOMICRIDES_URL=" + srv.URL, "ATOMICRIDES_API_KEY=" + rider.APIKey,
		"LEASE=bogus", "ADMIN_TOKEN=short", "STRIPE_SECRET_KEY=pk_test_not_secret", "DATABASE_URL=postgres://x@:notaport/db"}

	fake.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultStatus, Status: http.StatusServiceUnavailable, Times: 1})
	first := runBook(t, env, "--from", "37.7749,-122.4194", "--to", "37.8044, -122.2712")
	require.Equal(t, 0, first.exit, first.stderr)
	require.Contains(t, first.stderr, "attempt 1: 503; retrying")
	var out struct {
		Ride struct {
			ID             int64   `json:"id"`
			ChargeStatus   string  `json:"charge_status"`
			StripeChargeID string  `json:"stripe_charge_id"`
			TargetLon      float64 `json:"target_lon"`
		} `json:"ride"`
		IdempotencyKey string `json:"idempotency_key"`
		Replayed       bool   `json:"replayed"`
		Attempts       int    `json:"attempts"`
	}
	require.NoError(t, json.Unmarshal([]byte(first.stdout), &out), first.stdout)
	require.Equal(t, "charged", out.Ride.ChargeStatus)
	require.Equal(t, -122.2712, out.Ride.TargetLon)
	require.False(t, out.Replayed)
	require.Equal(t, 2, out.Attempts)
	require.GreaterOrEqual(t, len(out.IdempotencyKey), 20)
	charges := fake.SucceededCharges()
	require.Len(t, charges, 1)
	require.Equal(t, charges[0].ID, out.Ride.StripeChargeID)

	again := runBook(t, env, "--from", "37.7749,-122.4194", "--to", "37.8044,-122.2712", "--key", out.IdempotencyKey)
	require.Equal(t, 0, again.exit, again.stderr)
	firstRide := out.Ride
	require.NoError(t, json.Unmarshal([]byte(again.stdout), &out))
	require.True(t, out.Replayed)
	require.Equal(t, firstRide, out.Ride)
	require.Len(t, fake.SucceededCharges(), 1, "the same key books nothing more")

	// The same key for another trip is refused, not booked.
	reused := runBook(t, env, "--from", "1,1", "--to", "2,2", "--key", out.IdempotencyKey)
	require.Equal(t, 1, reused.exit)
	require.Contains(t, reused.stderr, "422")

	noKey := runBook(t, []string{"ATOMICRIDES_URL=" + srv.URL, "ATOMICRIDES_API_KEY="}, "--from", "1,1", "--to", "2,2")
	require.Equal(t, 1, noKey.exit)
	require.Contains(t, noKey.stderr, "ATOMICRIDES_API_KEY")

	badFrom := runBook(t, env, "--from", "north", "--to", "2,2")
	require.Equal(t, 2, badFrom.exit, "a usage error")
	require.Contains(t, badFrom.stderr, "--from must be LAT,LON")

	outOfRange := runBook(t, env, "--from", "91,0", "--to", "2,2")
	require.Equal(t, 1, outOfRange.exit)
	require.Contains(t, outOfRange.stderr, "body.origin_lat")
	require.Len(t, fake.SucceededCharges(), 1)
}

// TestBookListCommand runs the real binary's `book list` against the real
// server: it prints the rider's rides newest first, following the list's
// cursors past a page of 100, and nothing of another rider's.
func TestBookListCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := testkit.NewStripe(t)
	pool := dbtest.New(t)
	svc, err := service.New(service.Config{Pool: pool, Payments: payments.New(payments.Config{
		APIBase: fake.URL, SecretKey: "sk_test_book_list", MaxNetworkRetries: payments.NoRetries,
	})})
	require.NoError(t, err)
	acc := testkit.NewAccounts(t, svc, nil)
	srv := httptest.NewServer(testkit.Conform(t, openapi.NewHandler(openapi.Config{Service: svc, Accounts: acc, Logger: slog.New(slog.DiscardHandler)})))
	t.Cleanup(srv.Close)
	rider, err := acc.UserUpsert(ctx, accounts.UserUpsertParams{Email: "lister@example.com", PaymentSource: "tok_visa"})
	require.NoError(t, err)
	other, err := acc.UserUpsert(ctx, accounts.UserUpsertParams{Email: "not-listed@example.com", PaymentSource: "tok_visa"})
	require.NoError(t, err)
	env := []string{"ATOMICRIDES_URL=" + srv.URL, "ATOMICRIDES_API_KEY=" + rider.APIKey}

	empty := runBook(t, env, "list")
	require.Equal(t, 0, empty.exit, empty.stderr)
	require.Equal(t, "no rides\n", empty.stdout)

	// 101 older rides, then two booked now, and one of another rider's.
	// Ids drawn uniformly: random_id()'s draws within one statement's
	// millisecond would meet.
	_, err = pool.Exec(ctx, `INSERT INTO rides (id, created_at, origin_lat, origin_lon, target_lat, target_lon, amount_cents, currency, user_id, payment_source)
		SELECT 1 + floor(random() * 9007199254740990)::bigint, now() - interval '1 day' + i * interval '1 second', 1, 2, 3, 4, 2000, 'usd', $1::bigint, 'tok_visa'
		FROM generate_series(1, 101) AS i`, rider.User.ID)
	require.NoError(t, err)
	var booked []int64
	for _, u := range []*accounts.UserUpsertResult{rider, rider, other} {
		resp, err := svc.RideCreate(ctx, u.User.ID, testkit.NewKey(), testkit.SomeRide, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.Status)
		booked = append(booked, testkit.DecodeRide(t, resp.Body).ID)
	}

	text := runBook(t, env, "list", "--limit", "2")
	require.Equal(t, 0, text.exit, text.stderr)
	lines := strings.Split(strings.TrimSpace(text.stdout), "\n")
	require.Len(t, lines, 3, text.stdout)
	require.Regexp(t, `^ID\s+BOOKED\s+CHARGE\s+AMOUNT\s+REFUND$`, lines[0])
	require.Regexp(t, `^`+strconv.FormatInt(booked[1], 10)+`\s+\S+\s+charged\s+20\.00 usd\s+none$`, lines[1])
	require.Regexp(t, `^`+strconv.FormatInt(booked[0], 10)+`\s`, lines[2])

	all := runBook(t, env, "list", "--limit", "500", "--json")
	require.Equal(t, 0, all.exit, all.stderr)
	var rides []service.Ride
	require.NoError(t, json.Unmarshal([]byte(all.stdout), &rides), all.stdout)
	require.Len(t, rides, 103, "every ride of the rider, across two pages of 100")
	require.Equal(t, []int64{booked[1], booked[0]}, []int64{rides[0].ID, rides[1].ID})
	seen := map[int64]bool{}
	for i, r := range rides {
		require.False(t, seen[r.ID], "ride %d twice", r.ID)
		seen[r.ID] = true
		require.NotEqual(t, booked[2], r.ID, "another rider's ride")
		if i > 0 {
			require.False(t, r.CreatedAt.After(rides[i-1].CreatedAt), "newest first")
		}
	}

	bad := runBook(t, env, "list", "--limit", "0")
	require.Equal(t, 2, bad.exit, "a usage error")
	require.Contains(t, bad.stderr, "--limit must be 1 to")
	noKey := runBook(t, []string{"ATOMICRIDES_URL=" + srv.URL, "ATOMICRIDES_API_KEY=ark_wrong"}, "list")
	require.Equal(t, 1, noKey.exit)
	require.Contains(t, noKey.stderr, "401")
}

// tripDispatchToken is the dispatch side's token of the trip worlds.
const tripDispatchToken = "book-test-dispatch-token-5TQ2W"

// tripWorld is a real server whose bookings hold their fare
// (CAPTURE=trip), with the dispatch side's token, in front of its own fake
// Stripe.
func tripWorld(t *testing.T) (*testkit.Env, string) {
	t.Helper()
	env := testkit.NewWith(t, testkit.Options{Capture: service.CaptureTrip})
	return env, testkit.ServeAPI(t, openapi.NewHandler(openapi.Config{
		Service: env.Service, Accounts: env.Accounts, DispatchToken: tripDispatchToken, Logger: slog.New(slog.DiscardHandler),
	}))
}

// tripRun is what `book complete` and `book cancel` print on success.
type tripRun struct {
	Ride struct {
		ID              int64   `json:"id"`
		ChargeStatus    string  `json:"charge_status"`
		FareCents       *int64  `json:"fare_cents"`
		CapturedCents   *int64  `json:"amount_captured_cents"`
		ExtraStatus     *string `json:"extra_status"`
		BalanceDueCents int64   `json:"balance_due_cents"`
		ReleasedAt      *string `json:"released_at"`
		CompletedAt     *string `json:"completed_at"`
	} `json:"ride"`
	Status         int    `json:"status"`
	IdempotencyKey string `json:"idempotency_key"`
	Replayed       bool   `json:"replayed"`
	Attempts       int    `json:"attempts"`
}

func decodeTrip(t *testing.T, r bookRun) tripRun {
	t.Helper()
	require.Equal(t, 0, r.exit, r.stderr)
	var out tripRun
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	return out
}

// bookTripCLI books a trip through `book` and returns its id: the booking
// holds the fare.
func bookTripCLI(t *testing.T, env []string) int64 {
	t.Helper()
	r := runBook(t, env, "--from", "37.7749,-122.4194", "--to", "37.8044,-122.2712")
	require.Equal(t, 0, r.exit, r.stderr)
	var out struct {
		Ride struct {
			ID           int64  `json:"id"`
			ChargeStatus string `json:"charge_status"`
			Capture      string `json:"capture"`
		} `json:"ride"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	require.Equal(t, "authorized", out.Ride.ChargeStatus)
	require.Equal(t, "trip", out.Ride.Capture)
	return out.Ride.ID
}

// executed counts the requests of op the fake Stripe executed (not
// replays).
func executed(fake *testkit.Stripe, op string) int {
	n := 0
	for _, r := range fake.Requests() {
		if r.Op == op && !r.Replayed && r.Status == http.StatusOK {
			n++
		}
	}
	return n
}

// TestBookCompleteCommand runs the real binary's `book complete` against a
// trip server: the first capture fails at Stripe, the command retries with
// its one key and the fare is captured once; --key replays the completion,
// another key gets the same one (200), another fare is refused. The token
// comes from DISPATCH_TOKEN or --dispatch-token, and nothing else will do.
// A fare above the hold whose payment is declined leaves a balance due,
// and the rider's next `book` is refused naming the ride.
func TestBookCompleteCommand(t *testing.T) {
	t.Parallel()
	world, url := tripWorld(t)
	rider := world.Rider(t, "trip-cli@example.com", "tok_visa")
	riderEnv := []string{"ATOMICRIDES_URL=" + url, "ATOMICRIDES_API_KEY=" + rider.APIKey, "DISPATCH_TOKEN="}
	dispatchEnv := []string{"ATOMICRIDES_URL=" + url, "ATOMICRIDES_API_KEY=", "DISPATCH_TOKEN=" + tripDispatchToken}
	id := bookTripCLI(t, riderEnv)
	rideID := strconv.FormatInt(id, 10)

	world.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCapture, Kind: fakestripe.FaultStatus, Status: http.StatusServiceUnavailable, Times: 1})
	first := runBook(t, dispatchEnv, "complete", rideID, "1850")
	require.Contains(t, first.stderr, "attempt 1: 503; retrying")
	done := decodeTrip(t, first)
	require.Equal(t, id, done.Ride.ID)
	require.Equal(t, "completed", done.Ride.ChargeStatus)
	require.Equal(t, int64(1850), *done.Ride.FareCents)
	require.Equal(t, "none", *done.Ride.ExtraStatus)
	require.Equal(t, http.StatusCreated, done.Status)
	require.Equal(t, 2, done.Attempts)
	require.False(t, done.Replayed)
	require.GreaterOrEqual(t, len(done.IdempotencyKey), 20)
	require.Equal(t, 1, executed(world.Stripe, fakestripe.OpPaymentIntentCapture))

	// The key of the first run, after the arguments: the stored answer.
	again := decodeTrip(t, runBook(t, dispatchEnv, "complete", rideID, "1850", "--key", done.IdempotencyKey))
	require.True(t, again.Replayed)
	require.Equal(t, done.Ride, again.Ride)
	// Another key, the token from the flag: the same completion, 200.
	other := decodeTrip(t, runBook(t, riderEnv, "complete", "--dispatch-token", tripDispatchToken, rideID, "1850"))
	require.Equal(t, http.StatusOK, other.Status)
	require.Equal(t, done.Ride.CompletedAt, other.Ride.CompletedAt)
	// Another fare: refused, not retried.
	refused := runBook(t, dispatchEnv, "complete", rideID, "1900")
	require.Equal(t, 1, refused.exit)
	require.Contains(t, refused.stderr, "409")
	require.Contains(t, refused.stderr, "1850", "the refusal names the completion's fare")
	require.NotContains(t, refused.stderr, "retrying")
	require.Equal(t, 1, executed(world.Stripe, fakestripe.OpPaymentIntentCapture), "captured once")

	// No token, or a rider's key for one: refused before or by the server.
	noToken := runBook(t, riderEnv, "complete", rideID, "1850")
	require.Equal(t, 1, noToken.exit)
	require.Contains(t, noToken.stderr, "DISPATCH_TOKEN")
	riderKey := runBook(t, riderEnv, "complete", "--dispatch-token", rider.APIKey, rideID, "1850")
	require.Equal(t, 1, riderKey.exit)
	require.Contains(t, riderKey.stderr, "401")

	// A fare above the hold whose own payment is declined: completed, with
	// a balance due that blocks the rider's next booking.
	owing := bookTripCLI(t, riderEnv)
	world.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultRefuse, Status: http.StatusPaymentRequired, Times: 1})
	due := runBook(t, dispatchEnv, "complete", strconv.FormatInt(owing, 10), strconv.Itoa(service.RideAmountCents+500))
	dueRide := decodeTrip(t, due)
	require.Equal(t, "completed", dueRide.Ride.ChargeStatus)
	require.Equal(t, "due", *dueRide.Ride.ExtraStatus)
	require.Equal(t, int64(500), dueRide.Ride.BalanceDueCents)
	require.Contains(t, due.stderr, "owes 5.00 USD")
	blocked := runBook(t, riderEnv, "--from", "1,1", "--to", "2,2")
	require.Equal(t, 1, blocked.exit)
	require.Contains(t, blocked.stderr, "402")
	require.Contains(t, blocked.stderr, "ride "+strconv.FormatInt(owing, 10), "the refusal names the ride that owes")
}

// TestBookCancelCommand runs the real binary's `book cancel` against a
// trip server: the rider cancels through a failed release at Stripe, with
// one key, and the hold is released once; --key replays it, the dispatch
// side's cancellation under another key gets the same ride (200), another
// rider's is not found, and a completed trip is refused.
func TestBookCancelCommand(t *testing.T) {
	t.Parallel()
	world, url := tripWorld(t)
	rider := world.Rider(t, "cancel-cli@example.com", "tok_visa")
	stranger := world.Rider(t, "stranger-cli@example.com", "tok_visa")
	riderEnv := []string{"ATOMICRIDES_URL=" + url, "ATOMICRIDES_API_KEY=" + rider.APIKey, "DISPATCH_TOKEN="}
	id := bookTripCLI(t, riderEnv)
	rideID := strconv.FormatInt(id, 10)

	world.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCancel, Kind: fakestripe.FaultStatus, Status: http.StatusServiceUnavailable, Times: 1})
	first := runBook(t, riderEnv, "cancel", rideID)
	require.Contains(t, first.stderr, "attempt 1: 503; retrying")
	cancelled := decodeTrip(t, first)
	require.Equal(t, id, cancelled.Ride.ID)
	require.Equal(t, "cancelled", cancelled.Ride.ChargeStatus)
	require.NotNil(t, cancelled.Ride.ReleasedAt)
	require.Equal(t, http.StatusCreated, cancelled.Status)
	require.Equal(t, 2, cancelled.Attempts)
	require.Equal(t, 1, executed(world.Stripe, fakestripe.OpPaymentIntentCancel))

	again := decodeTrip(t, runBook(t, riderEnv, "cancel", "--key", cancelled.IdempotencyKey, rideID))
	require.True(t, again.Replayed)
	require.Equal(t, cancelled.Ride, again.Ride)

	// The dispatch side, under another key: the same ride, 200.
	byDispatch := decodeTrip(t, runBook(t, []string{"ATOMICRIDES_URL=" + url, "ATOMICRIDES_API_KEY=", "DISPATCH_TOKEN=" + tripDispatchToken}, "cancel", rideID, "--dispatch"))
	require.Equal(t, http.StatusOK, byDispatch.Status)
	require.Equal(t, cancelled.Ride.ReleasedAt, byDispatch.Ride.ReleasedAt)
	require.Equal(t, 1, executed(world.Stripe, fakestripe.OpPaymentIntentCancel), "released once")
	noToken := runBook(t, riderEnv, "cancel", rideID, "--dispatch")
	require.Equal(t, 1, noToken.exit)
	require.Contains(t, noToken.stderr, "DISPATCH_TOKEN")

	notTheirs := runBook(t, []string{"ATOMICRIDES_URL=" + url, "ATOMICRIDES_API_KEY=" + stranger.APIKey}, "cancel", rideID)
	require.Equal(t, 1, notTheirs.exit)
	require.Contains(t, notTheirs.stderr, "404")

	// A completed trip: refused (refund it instead), not retried.
	completed := bookTripCLI(t, riderEnv)
	decodeTrip(t, runBook(t, riderEnv, "complete", "--dispatch-token", tripDispatchToken, strconv.FormatInt(completed, 10), "1400"))
	refused := runBook(t, riderEnv, "cancel", strconv.FormatInt(completed, 10))
	require.Equal(t, 1, refused.exit)
	require.Contains(t, refused.stderr, "409")
	require.Contains(t, refused.stderr, "refund")
	require.NotContains(t, refused.stderr, "retrying")
}

// TestBookTripCommandLine: `book complete` and `book cancel` print their
// usage on --help, and a malformed command line is one line on stderr
// naming the bad argument, exit status 2, before anything is read or sent.
func TestBookTripCommandLine(t *testing.T) {
	t.Parallel()
	env := []string{unreachableDB, "ATOMICRIDES_API_KEY=", "DISPATCH_TOKEN="}
	for _, c := range []struct {
		args []string
		says []string
	}{
		{[]string{"help", "book"}, []string{"usage: atomicrides book --from", "book complete RIDE-ID FARE-CENTS", "book cancel RIDE-ID"}},
		{[]string{"book", "complete", "--help"}, []string{"usage: atomicrides book complete RIDE-ID FARE-CENTS", "DISPATCH_TOKEN", "-key", "-currency", "-dispatch-token"}},
		{[]string{"book", "cancel", "-h"}, []string{"usage: atomicrides book cancel RIDE-ID", "ATOMICRIDES_API_KEY", "-key", "-dispatch"}},
	} {
		r := binrun.RunT(t, env, c.args...)
		require.Equal(t, 0, r.ExitCode, "%v: %s", c.args, r.Stderr)
		require.Empty(t, r.Stderr, c.args)
		for _, says := range c.says {
			require.Contains(t, r.Stdout, says, c.args)
		}
	}

	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"book", "complete"}, "book complete: missing RIDE-ID"},
		{[]string{"book", "complete", "42"}, "book complete: missing FARE-CENTS"},
		{[]string{"book", "complete", "ride-42", "1850"}, `book complete: ride id "ride-42": want a positive integer`},
		{[]string{"book", "complete", "0", "1850"}, `book complete: ride id "0"`},
		{[]string{"book", "complete", "42", "18.50"}, `book complete: fare "18.50": want a positive whole number of cents`},
		{[]string{"book", "complete", "42", "-5"}, `book complete: fare "-5"`},
		{[]string{"book", "complete", "42", "1850", "7"}, `book complete: unexpected argument "7"`},
		{[]string{"book", "complete", "42", "1850", "--currency", "USD"}, `book complete: --currency "USD"`},
		{[]string{"book", "complete", "42", "1850", "--fare", "1"}, "book complete: flag provided but not defined: -fare"},
		{[]string{"book", "complete", "42", "1850", "--key"}, "book complete: flag needs an argument: -key"},
		{[]string{"book", "cancel"}, "book cancel: missing RIDE-ID"},
		{[]string{"book", "cancel", "-7"}, `book cancel: ride id "-7"`},
		{[]string{"book", "cancel", "42", "43"}, `book cancel: unexpected argument "43"`},
		{[]string{"book", "cancel", "--dispatch=maybe", "42"}, "book cancel: invalid boolean value"},
	} {
		r := binrun.RunT(t, env, c.args...)
		require.Equal(t, 2, r.ExitCode, "%v: %s", c.args, r.Stderr)
		require.Empty(t, r.Stdout, c.args)
		require.Equal(t, 1, strings.Count(r.Stderr, "\n"), "%v: one line: %q", c.args, r.Stderr)
		require.True(t, strings.HasPrefix(r.Stderr, "atomicrides: "), "%v: %q", c.args, r.Stderr)
		require.Contains(t, r.Stderr, c.says, c.args)
	}
}
