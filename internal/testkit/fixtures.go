package testkit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/fakestripe"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
)

// SomeRide is the trip tests book when the trip does not matter: San
// Francisco to Oakland, charged 20.00 USD.
var SomeRide = service.RideCreateParams{OriginLat: 37.7749, OriginLon: -122.4194, TargetLat: 37.8044, TargetLon: -122.2712}

// SomeRideJSON is SomeRide as the body of POST /rides.
const SomeRideJSON = `{"origin_lat":37.7749,"origin_lon":-122.4194,"target_lat":37.8044,"target_lon":-122.2712}`

var keySeq atomic.Int64

// NewKey returns a valid idempotency key that no other call in this test
// process returns.
func NewKey() string { return fmt.Sprintf("test-key-%020d", keySeq.Add(1)) }

// Rider is a user created through the service, with its one API key.
type Rider struct {
	ID     int64
	Email  string
	APIKey string
}

// Rider creates a new rider paying with source (a fake Stripe token such as
// fakestripe.TokenChargeDeclined; "" is the service's default card). It
// fails t unless the rider is new.
func (e *Env) Rider(t testing.TB, email, source string) Rider {
	t.Helper()
	res, err := e.Accounts.UserUpsert(e.Ctx, accounts.UserUpsertParams{Email: email, PaymentSource: source})
	require.NoError(t, err)
	require.True(t, res.Created, "rider %s exists already", email)
	require.NotEmpty(t, res.APIKey)
	return Rider{ID: res.User.ID, Email: res.User.Email, APIKey: res.APIKey}
}

// Ride books SomeRide for the rider under a fresh idempotency key and
// returns the ride; it fails t unless the ride was created and charged
// (201).
func (e *Env) Ride(t testing.TB, riderID int64) service.Ride {
	t.Helper()
	resp, err := e.Service.RideCreate(e.Ctx, riderID, NewKey(), SomeRide, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.Status, string(resp.Body))
	return DecodeRide(t, resp.Body)
}

// AbandonRide leaves the rider's request under key at ride_created,
// unlocked, as a client that gave up after a processor outage would, and
// returns the idempotency key's id.
func (e *Env) AbandonRide(t testing.TB, riderID int64, key string) int64 {
	t.Helper()
	e.Stripe.Inject(fakestripe.Fault{Op: fakestripe.OpPaymentIntentCreate, Kind: fakestripe.FaultStatus, Status: http.StatusServiceUnavailable, Times: 1})
	_, err := e.Service.RideCreate(e.Ctx, riderID, key, SomeRide, nil)
	require.Equal(t, service.CodeProcessorUnavailable, service.ErrorCode(err), "err: %v", err)
	var (
		id     int64
		point  string
		locked bool
	)
	require.NoError(t, e.Pool.QueryRow(e.Ctx,
		`SELECT id, recovery_point, locked_at IS NOT NULL FROM idempotency_keys WHERE user_id = $1 AND idempotency_key = $2`,
		riderID, key).Scan(&id, &point, &locked))
	require.Equal(t, "ride_created", point)
	require.False(t, locked)
	return id
}

// DecodeRide decodes a stored 201 answer of a ride request.
func DecodeRide(t testing.TB, body []byte) service.Ride {
	t.Helper()
	var r service.Ride
	require.NoError(t, json.Unmarshal(body, &r))
	return r
}

// RequireCode fails t unless err is a domain error of code, and returns it.
func RequireCode(t testing.TB, err error, code service.Code) *service.Error {
	t.Helper()
	require.Error(t, err)
	var e *service.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, code, e.Code, "error: %v", err)
	return e
}
