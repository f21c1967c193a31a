-- The trip of a ride booked with capture 'trip' (0020_trips.sql): its hold,
-- its completion, its cancellation or expiry, and the balance a rider owes.
-- Every move is one conditional update: two paths racing apply once.

-- name: RideSetAuthorizedAudited :execrows
-- The booking's hold was placed: the payment is authorized, nothing is
-- captured, and the hold is kept until hold_expires_at; with its audit
-- record, in one statement. The rows are the audit records written: 1, or
-- 0 when the ride was no longer pending.
WITH ride AS (
    UPDATE rides
    SET charge_status = 'authorized', stripe_charge_id = @stripe_charge_id::text,
        payment_id = sqlc.narg(payment_id), charge_key = sqlc.narg(charge_key),
        hold_expires_at = @hold_expires_at::timestamptz
    WHERE rides.id = @id AND rides.charge_status = 'pending'
    RETURNING rides.id, rides.user_id
)
INSERT INTO audit_records (action, data, origin_ip, resource_id, resource_type, user_id)
SELECT 'ride.authorized', @audit_data, @origin_ip, ride.id, 'ride', ride.user_id FROM ride;

-- name: RideActionAuthorized :one
-- The rider authenticated the waiting ride's hold: authorized, once.
UPDATE rides
SET charge_status = 'authorized', stripe_charge_id = @stripe_charge_id::text,
    payment_id = coalesce(sqlc.narg(payment_id), payment_id), action_decided_at = now(),
    hold_expires_at = now() + make_interval(secs => @hold_seconds::float8)
WHERE id = @id AND charge_status = 'requires_action'
RETURNING *;

-- name: RideLock :one
-- Any rider's ride, locked: the dispatch side's completions and
-- cancellations take turns on it with the rider's.
SELECT * FROM rides WHERE id = @id FOR UPDATE;

-- name: RideCaptureRequested :execrows
-- The processor took the capture on (Adyen answers received): its
-- reference, once.
UPDATE rides SET capture_id = @capture_id::text
WHERE id = @id AND charge_status IN ('capturing', 'completed') AND capture_id IS NULL;

-- name: RideCaptured :one
-- The processor captured captured_cents of the hold, once.
UPDATE rides
SET captured_cents = @captured_cents::bigint, capture_id = coalesce(capture_id, sqlc.narg(capture_id))
WHERE id = @id AND charge_status = 'capturing' AND captured_cents IS NULL
RETURNING *;

-- name: RideExtraRecord :one
-- The completion decided the fare above the hold: none, charged, or due.
UPDATE rides
SET extra_status = @extra_status::text, extra_charge_id = sqlc.narg(extra_charge_id),
    extra_failure_code = sqlc.narg(extra_failure_code)
WHERE id = @id AND charge_status IN ('capturing', 'completed', 'capture_failed') AND extra_status IS NULL
RETURNING *;

-- name: RideCompletionFinish :one
-- A capturing ride whose capture and extra payment are both decided is
-- completed, once: whichever write decided the last of them finishes it.
UPDATE rides SET charge_status = 'completed', completed_at = now()
WHERE id = @id AND charge_status = 'capturing' AND captured_cents IS NOT NULL AND extra_status IS NOT NULL
RETURNING *;

-- name: RideCaptureFailed :one
-- The processor failed the capture (Adyen's CAPTURE with success false, or
-- CAPTURE_FAILED after it): the ride shows it, once.
UPDATE rides SET charge_status = 'capture_failed', capture_failure = @capture_failure::text
WHERE id = @id AND charge_status IN ('capturing', 'completed')
RETURNING *;

-- name: RideReleaseStart :one
-- The hold is to be released: cancelled by a request (cancel_key_id), or
-- expired. The ride waits at cancelling for the processor's answer.
UPDATE rides
SET charge_status = 'cancelling', release_reason = @release_reason::text, cancel_key_id = sqlc.narg(cancel_key_id)
WHERE id = @id AND charge_status = 'authorized'
RETURNING *;

-- name: RideReleaseFinish :one
-- The processor released the hold: cancelled or expired, by the reason the
-- release started with, once.
UPDATE rides SET charge_status = release_reason, released_at = now()
WHERE id = @id AND charge_status = 'cancelling'
RETURNING *;

-- name: RideHoldExpired :one
-- The processor released the hold by itself (its expiry): a ride still
-- holding it is expired, one being cancelled is cancelled, once.
UPDATE rides
SET charge_status = coalesce(release_reason, 'expired'), release_reason = coalesce(release_reason, 'expired'),
    released_at = now()
WHERE id = @id AND charge_status IN ('authorized', 'cancelling')
RETURNING *;

-- name: RideCancelRequested :execrows
-- The processor took the cancel of a ride's payment on and tells its
-- outcome later: the ride, still waiting (for its rider, or in
-- cancelling), records when. A ride the outcome moved already is left as
-- it is.
UPDATE rides SET cancel_requested_at = coalesce(cancel_requested_at, now())
WHERE id = @id AND charge_status IN ('requires_action', 'cancelling');

-- name: RideCancelFailed :one
-- The processor refused the cancel of the payment of a ride that still
-- waits for it: the ride stays where it is, with the reason, for the
-- operator.
UPDATE rides SET cancel_failure = @cancel_failure::text
WHERE id = @id AND charge_status IN ('requires_action', 'cancelling')
RETURNING *;

-- name: RideCancelsFailedCount :one
-- How many rides still wait after the processor refused their cancel (the
-- operators' gauge): a scan of the partial index rides_cancel_failed.
SELECT count(*)::bigint FROM rides
WHERE cancel_failure IS NOT NULL AND charge_status IN ('requires_action', 'cancelling');

-- name: RideHoldsToRelease :many
-- Holds past their expiry, and expiries whose release did not finish, the
-- oldest first.
-- A release the processor took on (cancel_requested_at) waits for its
-- notification, and is asked for again only once that is an hour late; one
-- the processor refused (cancel_failure) is the operator's.
SELECT * FROM rides
WHERE charge_status IN ('authorized', 'cancelling') AND hold_expires_at <= now()
  AND (charge_status = 'authorized' OR (release_reason = 'expired' AND cancel_failure IS NULL
       AND (cancel_requested_at IS NULL OR cancel_requested_at < now() - interval '1 hour')))
ORDER BY hold_expires_at
LIMIT @row_limit;

-- name: RideBalanceDue :one
-- The oldest ride whose balance the rider owes.
SELECT id, extra_cents::bigint AS extra_cents, currency FROM rides
WHERE user_id = @user_id AND extra_status = 'due'
ORDER BY created_at, id
LIMIT 1;

-- name: RideBalanceAttempt :one
-- A request to pay the ride's balance: its processor key's attempt.
UPDATE rides SET balance_attempt = balance_attempt + 1
WHERE id = @id AND extra_status = 'due'
RETURNING *;

-- name: RideBalancePaid :one
-- The rider paid the ride's balance, once.
UPDATE rides SET extra_status = 'paid', extra_charge_id = @extra_charge_id::text, extra_failure_code = NULL
WHERE id = @id AND extra_status = 'due'
RETURNING *;

-- name: RideBalanceFailed :execrows
-- A payment of the ride's balance was declined: why, on the ride.
UPDATE rides SET extra_failure_code = @extra_failure_code::text
WHERE id = @id AND extra_status = 'due';

-- name: RideGetByPayment :one
-- The ride of a processor's payment (Adyen's modifications name it).
SELECT * FROM rides WHERE processor = @processor AND payment_id = @payment_id;

-- name: RideTripGauges :one
-- The operators' gauges of trips: holds outstanding and the oldest's age,
-- completions waiting for the processor, captures failed, balances due.
SELECT
    count(*) FILTER (WHERE charge_status IN ('authorized', 'cancelling'))::bigint AS holds,
    coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE charge_status IN ('authorized', 'cancelling'))), 0)::float8 AS oldest_hold_seconds,
    count(*) FILTER (WHERE charge_status = 'capturing')::bigint AS capturing,
    count(*) FILTER (WHERE charge_status = 'capture_failed')::bigint AS capture_failed,
    count(*) FILTER (WHERE extra_status = 'due')::bigint AS balances_due,
    coalesce(sum(extra_cents) FILTER (WHERE extra_status = 'due'), 0)::bigint AS balance_due_cents
FROM rides
WHERE charge_status IN ('authorized', 'cancelling', 'capturing', 'capture_failed') OR extra_status = 'due';

-- name: RideCompletionRecognised :one
-- A hold the processor shows captured while the ride still holds it: its
-- completion was lost (a restore) or made outside the service. The ride is
-- completed with what was captured as its fare, once.
UPDATE rides
SET charge_status = 'completed', fare_cents = @captured_cents::bigint, captured_cents = @captured_cents::bigint,
    capture_id = sqlc.narg(capture_id), extra_status = 'none', completion_requested_at = now(), completed_at = now()
WHERE id = @id AND charge_status IN ('authorized', 'cancelling')
RETURNING *;

-- name: RideLockWithRider :one
-- A ride, locked, with its rider: the completion's first phase in one
-- round trip.
SELECT sqlc.embed(rides), sqlc.embed(users)
FROM rides JOIN users ON users.id = rides.user_id
WHERE rides.id = @id
FOR UPDATE OF rides;

-- name: RideCompletionStartAudited :one
-- RideCompletionStart and its audit record in one statement.
WITH ride AS (
    UPDATE rides
    SET charge_status = 'capturing', fare_cents = @fare_cents::bigint, completion_key_id = @completion_key_id::bigint,
        completion_requested_at = now(), extra_cents = sqlc.narg(extra_cents)
    WHERE rides.id = @id AND rides.charge_status = 'authorized'
    RETURNING *
), audit AS (
    INSERT INTO audit_records (action, data, origin_ip, resource_id, resource_type, user_id)
    SELECT 'ride.completion_requested', @audit_data, @origin_ip, ride.id, 'ride', ride.user_id FROM ride
)
SELECT sqlc.embed(rides) FROM ride AS rides;

-- name: RideCompletionSettle :one
-- A capturing ride whose capture and fare above the hold were both decided
-- by one call (the capture made at once): captured, the extra recorded and
-- completed, with its audit record, in one statement. No row: another
-- path recorded part of it first (the general path then records the rest).
WITH ride AS (
    UPDATE rides
    SET captured_cents = @captured_cents::bigint, capture_id = @capture_id::text,
        extra_status = @extra_status::text, extra_charge_id = sqlc.narg(extra_charge_id),
        extra_failure_code = sqlc.narg(extra_failure_code),
        charge_status = 'completed', completed_at = now()
    WHERE rides.id = @id AND rides.charge_status = 'capturing' AND rides.captured_cents IS NULL
      AND rides.capture_id IS NULL AND rides.extra_status IS NULL
    RETURNING *
), audit AS (
    INSERT INTO audit_records (action, data, resource_id, resource_type, user_id)
    SELECT 'ride.completed', @audit_data, ride.id, 'ride', ride.user_id FROM ride
)
SELECT sqlc.embed(rides) FROM ride AS rides;
