-- name: RideCreate :one
INSERT INTO rides (
    idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon,
    amount_cents, currency, user_id
) VALUES (
    @idempotency_key_id, @origin_lat, @origin_lon, @target_lat, @target_lon,
    @amount_cents, @currency, @user_id
)
RETURNING *;

-- name: RideGetByIdempotencyKey :one
SELECT * FROM rides WHERE idempotency_key_id = @idempotency_key_id;

-- name: RideGetForUser :one
SELECT * FROM rides WHERE id = @id AND user_id = @user_id;

-- name: RideGetWithRefund :one
-- The user's ride with its refund, if any: what the rider may know of it.
SELECT sqlc.embed(rides), refunds.status AS refund_status, refunds.stripe_refund_id AS stripe_refund_id,
    refunds.failure_code AS refund_failure_code
FROM rides LEFT JOIN refunds ON refunds.ride_id = rides.id
WHERE rides.id = @id AND rides.user_id = @user_id;

-- name: RideListForUser :many
-- One page of a rider's rides, newest first: those strictly between two
-- (created_at, id) positions, with their refunds, at most row_limit. The
-- bounds are row comparisons on rides_user_id_created_at_id, so a page is
-- one range scan wherever it starts.
SELECT sqlc.embed(rides), refunds.status AS refund_status, refunds.stripe_refund_id AS stripe_refund_id,
    refunds.failure_code AS refund_failure_code
FROM rides LEFT JOIN refunds ON refunds.ride_id = rides.id
WHERE rides.user_id = @user_id
  AND (rides.created_at, rides.id) > (@after_created_at::timestamptz, @after_id::bigint)
  AND (rides.created_at, rides.id) < (@before_created_at::timestamptz, @before_id::bigint)
  AND (@charge_status::text = '' OR rides.charge_status = @charge_status::text)
ORDER BY rides.created_at DESC, rides.id DESC
LIMIT @row_limit;

-- name: RideListForUserAscending :many
-- RideListForUser read from the oldest end: the page just newer than a
-- cursor (ending_before), returned oldest first.
SELECT sqlc.embed(rides), refunds.status AS refund_status, refunds.stripe_refund_id AS stripe_refund_id,
    refunds.failure_code AS refund_failure_code
FROM rides LEFT JOIN refunds ON refunds.ride_id = rides.id
WHERE rides.user_id = @user_id
  AND (rides.created_at, rides.id) > (@after_created_at::timestamptz, @after_id::bigint)
  AND (rides.created_at, rides.id) < (@before_created_at::timestamptz, @before_id::bigint)
  AND (@charge_status::text = '' OR rides.charge_status = @charge_status::text)
ORDER BY rides.created_at, rides.id
LIMIT @row_limit;

-- name: RideSetCharged :execrows
-- Records the charge of a pending ride: its charge, and for a payments-API
-- ride its payment and the key it was made under.
UPDATE rides
SET charge_status = 'charged', stripe_charge_id = @stripe_charge_id::text,
    payment_id = sqlc.narg(payment_id), charge_key = sqlc.narg(charge_key)
WHERE id = @id AND charge_status = 'pending';

-- name: RideSetDeclined :execrows
-- Records a declined charge with what the rider was told.
UPDATE rides
SET charge_status = 'declined', decline_code = @decline_code::text, decline_message = @decline_message::text
WHERE id = @id AND charge_status = 'pending';


-- name: RideLockForUser :one
SELECT * FROM rides WHERE id = @id AND user_id = @user_id FOR UPDATE;

-- name: RideCreateAudited :one
-- Books a ride and writes its audit record in one statement, and returns the
-- ride with its rider (whom the charge needs): the ride phase in one round
-- trip. A rider who owes the balance of a ride books nothing: no row.
WITH ride AS (
    INSERT INTO rides (
        idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon,
        amount_cents, currency, user_id, processor, payment_api, capture, payment_source
    )
    SELECT
        @idempotency_key_id, @origin_lat, @origin_lon, @target_lat, @target_lon,
        @amount_cents, @currency, @user_id, @processor, @payment_api, @capture,
        -- the source the ride is charged with, whatever the rider's later
        (SELECT payment_source FROM users WHERE id = @user_id)
    WHERE NOT EXISTS (SELECT 1 FROM rides owed WHERE owed.user_id = @user_id AND owed.extra_status = 'due')
    RETURNING *
), audit AS (
    INSERT INTO audit_records (action, data, origin_ip, resource_id, resource_type, user_id)
    SELECT @audit_action, @audit_data, @origin_ip, ride.id, 'ride', ride.user_id FROM ride
)
SELECT sqlc.embed(rides), sqlc.embed(users),
    -- whether a booking of the rider was lost and its charge refunded
    -- (orphans.go): only then does the charge call look for this one's
    EXISTS (SELECT 1 FROM orphan_refunds o WHERE o.user_id = users.id AND o.status = 'refunded') AS refunded_orphans,
    -- whether the database may have lost an earlier send of this request
    -- (database_gaps.sql), and since when
    (gap.lost_from IS NOT NULL)::boolean AS gap_open, coalesce(gap.lost_from, now())::timestamptz AS gap_lost_from
FROM ride AS rides JOIN users ON users.id = rides.user_id
CROSS JOIN (SELECT database_lost_from() AS lost_from) AS gap;

-- name: RideListRecordedCharges :many
-- Of the given processor charge ids, those a ride records (reconciliation):
-- its charge (a trip's hold included), or the payment of its fare above
-- the hold.
SELECT stripe_charge_id::text FROM rides
WHERE stripe_charge_id = ANY(@stripe_charge_ids::text[])
UNION ALL
SELECT extra_charge_id::text FROM rides
WHERE extra_charge_id = ANY(@stripe_charge_ids::text[]);

-- name: RideListChargedSince :many
-- Rides recorded as charged that were created within since_seconds by the
-- database's clock (reconciliation).
SELECT id, stripe_charge_id::text AS stripe_charge_id, created_at, processor FROM rides
WHERE charge_status IN ('charged', 'completed')
  AND created_at >= now() - make_interval(secs => @since_seconds::float8)
ORDER BY id;

-- name: RideReroute :execrows
-- Moves a pending ride to another processor as its next attempt, after a
-- definitive "not charged" at the one it was routed to.
UPDATE rides
SET processor = @processor, payment_api = @payment_api, charge_attempt = charge_attempt + 1
WHERE id = @id AND charge_status = 'pending' AND charge_attempt = @charge_attempt;

-- name: RideListChargedElsewhere :many
-- Rides created within since_seconds, charged at a processor other than
-- @processor, with what their charge key is made of (the rider's email and
-- the client's key, while the key is kept): reconciliation recognises a
-- charge at @processor under such a key as a second charge of the ride.
SELECT rides.id, rides.processor, rides.stripe_charge_id::text AS charge_id,
       users.email, idempotency_keys.idempotency_key
FROM rides
JOIN users ON users.id = rides.user_id
JOIN idempotency_keys ON idempotency_keys.id = rides.idempotency_key_id
WHERE rides.charge_status IN ('charged', 'authorized', 'capturing', 'completed')
  AND rides.processor <> @processor
  AND rides.created_at >= now() - make_interval(secs => @since_seconds::float8);

-- name: RideLockByCharge :one
SELECT * FROM rides WHERE stripe_charge_id = @stripe_charge_id FOR UPDATE;

-- name: RideSetDispute :execrows
-- Moves the ride's dispute forward only: none -> disputed -> won or lost;
-- won and lost are final, and a stale event cannot move it back.
UPDATE rides
SET dispute_status = @dispute_status::text, stripe_dispute_id = @stripe_dispute_id::text
WHERE id = @id AND (
    dispute_status = 'none'
    OR (dispute_status = 'disputed' AND @dispute_status::text IN ('won', 'lost'))
);

-- name: RideGetByCharge :one
-- The ride that records a charge: its own (a trip's hold included), or the
-- payment of its fare above the hold.
SELECT * FROM rides
WHERE rides.stripe_charge_id = sqlc.arg(stripe_charge_id) OR rides.extra_charge_id = sqlc.arg(stripe_charge_id)
LIMIT 1;

-- name: RideSetRequiresAction :execrows
-- A pending ride whose rider's bank asked for authentication: it waits for
-- its rider until action_expires_at.
UPDATE rides
SET charge_status = 'requires_action', payment_id = sqlc.narg(payment_id), charge_key = @charge_key::text,
    action_url = sqlc.narg(action_url), action_client_secret = sqlc.narg(action_client_secret),
    action_expires_at = @action_expires_at::timestamptz
WHERE id = @id AND charge_status = 'pending';

-- name: RideActionCharged :one
-- The waiting ride's payment succeeded: charged, once. No row: the ride
-- had moved on already.
UPDATE rides
SET charge_status = 'charged', stripe_charge_id = @stripe_charge_id::text,
    payment_id = coalesce(sqlc.narg(payment_id), payment_id), action_decided_at = now()
WHERE id = @id AND charge_status = 'requires_action'
RETURNING *;

-- name: RideActionDeclined :one
-- The waiting ride's payment failed (authentication failed, or the bank
-- declined after it): declined, once.
UPDATE rides
SET charge_status = 'declined', decline_code = @decline_code::text, decline_message = @decline_message::text,
    payment_id = coalesce(sqlc.narg(payment_id), payment_id), action_decided_at = now()
WHERE id = @id AND charge_status = 'requires_action'
RETURNING *;

-- name: RideActionExpired :one
-- The waiting ride's payment was cancelled at the processor: expired, once.
UPDATE rides
SET charge_status = 'expired', action_decided_at = now()
WHERE id = @id AND charge_status = 'requires_action'
RETURNING *;

-- name: RideGet :one
SELECT * FROM rides WHERE id = @id;

-- name: RideGetByChargeKey :one
-- The newest ride made under a processor key: a key reused after its
-- idempotency key was reaped makes a new ride under the same key.
SELECT * FROM rides WHERE charge_key = @charge_key ORDER BY created_at DESC LIMIT 1;

-- name: RideActionsWaiting :one
-- How many rides wait for their rider (the operators' gauge): a scan of
-- the partial index rides_requires_action.
SELECT count(*)::bigint FROM rides WHERE charge_status = 'requires_action';
