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
	svc, err := service.New(service.Config{DevDefaultPaymentSource: true, Pool: dbtest.New(t), Payments: payments.New(payments.Config{
		APIBase: fake.URL, SecretKey: "sk_test_book", MaxNetworkRetries: payments.NoRetries,
	})})
	require.NoError(t, err)
	srv := httptest.NewServer(openapi.NewHandler(openapi.Config{Service: svc, Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	rider, err := svc.UserUpsert(ctx, service.UserUpsertParams{Email: "cli@example.com"})
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
	svc, err := service.New(service.Config{DevDefaultPaymentSource: true, Pool: pool, Payments: payments.New(payments.Config{
		APIBase: fake.URL, SecretKey: "sk_test_book_list", MaxNetworkRetries: payments.NoRetries,
	})})
	require.NoError(t, err)
	srv := httptest.NewServer(openapi.NewHandler(openapi.Config{Service: svc, Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	rider, err := svc.UserUpsert(ctx, service.UserUpsertParams{Email: "lister@example.com", PaymentSource: "tok_visa"})
	require.NoError(t, err)
	other, err := svc.UserUpsert(ctx, service.UserUpsertParams{Email: "not-listed@example.com", PaymentSource: "tok_visa"})
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
	for _, u := range []*service.UserUpsertResult{rider, rider, other} {
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
