package main

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
	"github.com/atomicrides/atomicrides/service/payments"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// TestKeysCommand lists, shows and completes a stuck request with the
// operator CLI of the real binary.
func TestKeysCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := dbtest.NewURL(t)
	fake := testkit.NewStripe(t)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// A request left at ride_created by a processor outage.
	svc, err := service.New(service.Config{Pool: pool, Payments: payments.New(payments.Config{
		APIBase: fake.URL, SecretKey: "sk_test_keys", MaxNetworkRetries: -1,
	})})
	require.NoError(t, err)
	res, err := testkit.NewAccounts(t, svc, nil).UserUpsert(ctx, accounts.UserUpsertParams{Email: "keys@example.com", PaymentSource: "tok_visa"})
	require.NoError(t, err)
	fake.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultStatus, Status: 503, Times: 1})
	_, err = svc.RideCreate(ctx, res.User.ID, "keys-command-key-000001",
		service.RideCreateParams{OriginLat: 1, OriginLon: 2, TargetLat: 3, TargetLon: 4}, nil)
	require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(err))

	keys := func(args ...string) string {
		t.Helper()
		res, err := binrun.Cmd{Bin: binrun.Build(t), Args: append([]string{"keys"}, args...), Dir: t.TempDir(),
			Env: []string{"DATABASE_URL=" + dbURL, "COMPLETER_IDLE=1ms",
				"STRIPE_API_BASE=" + fake.URL, "STRIPE_SECRET_KEY=sk_test_keys", "SMTP_URL=smtp://127.0.0.1:1"},
		}.Run(ctx)
		require.NoError(t, err)
		require.Zero(t, res.ExitCode, "keys %v: %s", args, res.Stderr)
		return res.Stdout
	}

	var listed []service.KeyInfo
	require.NoError(t, json.Unmarshal([]byte(keys("list", "-json")), &listed))
	require.Len(t, listed, 1)
	require.Equal(t, service.RecoveryPoint("ride_created"), listed[0].RecoveryPoint)
	id := strconv.FormatInt(listed[0].ID, 10)

	table := keys("list")
	require.Contains(t, table, "ride.create")
	require.Contains(t, table, "1 keys")
	shown := keys("show", id)
	require.Contains(t, shown, "keys-command-key-000001")
	require.Contains(t, shown, "ride_created")

	require.Regexp(t, `^key `+id+` finished: 201 \{`, keys("complete", id))
	require.Len(t, fake.SucceededCharges(), 1)
	require.Regexp(t, `^key `+id+` was already finished: 201 `, keys("complete", id))
	require.NoError(t, json.Unmarshal([]byte(keys("list", "-json")), &listed))
	require.Empty(t, listed)
	require.Len(t, fake.SucceededCharges(), 1)
}
