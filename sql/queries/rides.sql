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

-- name: RideSetCharged :execrows
UPDATE rides
SET charge_status = 'charged', stripe_charge_id = @stripe_charge_id::text
WHERE id = @id AND charge_status = 'pending';

-- name: RideSetDeclined :execrows
UPDATE rides
SET charge_status = 'declined'
WHERE id = @id AND charge_status = 'pending';


-- name: RideLockForUser :one
SELECT * FROM rides WHERE id = @id AND user_id = @user_id FOR UPDATE;

-- name: RideCreateAudited :one
-- Books a ride and writes its audit record in one statement, and returns the
-- ride with its rider (whom the charge needs): the ride phase in one round
-- trip.
WITH ride AS (
    INSERT INTO rides (
        idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon,
        amount_cents, currency, user_id
    ) VALUES (
        @idempotency_key_id, @origin_lat, @origin_lon, @target_lat, @target_lon,
        @amount_cents, @currency, @user_id
    )
    RETURNING *
), audit AS (
    INSERT INTO audit_records (action, data, origin_ip, resource_id, resource_type, user_id)
    SELECT @audit_action, @audit_data, @origin_ip, ride.id, 'ride', ride.user_id FROM ride
)
SELECT sqlc.embed(rides), sqlc.embed(users),
    -- whether a booking of the rider was lost and its charge refunded
    -- (orphans.go): only then does the charge call look for this one's
    EXISTS (SELECT 1 FROM orphan_refunds o WHERE o.user_id = users.id AND o.status = 'refunded') AS refunded_orphans
FROM ride AS rides JOIN users ON users.id = rides.user_id;

-- name: RideListRecordedCharges :many
-- Of the given processor charge ids, those a ride records (reconciliation).
SELECT stripe_charge_id::text FROM rides
WHERE stripe_charge_id = ANY(@stripe_charge_ids::text[]);

-- name: RideListChargedSince :many
-- Rides recorded as charged that were created within since_seconds by the
-- database's clock (reconciliation).
SELECT id, stripe_charge_id::text AS stripe_charge_id, created_at FROM rides
WHERE charge_status = 'charged'
  AND created_at >= now() - make_interval(secs => @since_seconds::float8)
ORDER BY id;

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
SELECT * FROM rides WHERE stripe_charge_id = @stripe_charge_id;
