-- name: RefundCreate :one
INSERT INTO refunds (ride_id, idempotency_key_id, amount_cents, currency)
VALUES (@ride_id, @idempotency_key_id, @amount_cents, @currency)
RETURNING *;

-- name: RefundGetByRide :one
SELECT * FROM refunds WHERE ride_id = @ride_id;

-- name: RefundLockByRide :one
SELECT * FROM refunds WHERE ride_id = @ride_id FOR UPDATE;

-- name: RefundSetRefunded :execrows
-- Records Stripe's refund once; a refund already recorded is left alone (0
-- rows) and its id is compared by the caller.
UPDATE refunds
SET status = 'refunded', stripe_refund_id = @stripe_refund_id::text, failure_code = NULL, updated_at = now()
WHERE ride_id = @ride_id AND status <> 'refunded';

-- name: RefundSetFailed :execrows
UPDATE refunds
SET status = 'failed', failure_code = @failure_code::text, updated_at = now()
WHERE ride_id = @ride_id AND status = 'pending';

-- name: RefundRetry :one
-- Asks again for a refund Stripe refused, on behalf of a new request, as the
-- next attempt: the processor key changes with it, so the processor hears
-- the request anew instead of replaying its refusal.
UPDATE refunds
SET status = 'pending', failure_code = NULL, idempotency_key_id = @idempotency_key_id,
    attempt = attempt + 1, updated_at = now()
WHERE ride_id = @ride_id AND status = 'failed'
RETURNING *;

-- name: RefundListRecorded :many
-- Of the given processor refund ids, those a refund records
-- (reconciliation).
SELECT stripe_refund_id::text FROM refunds
WHERE stripe_refund_id = ANY(@stripe_refund_ids::text[]);

-- name: RefundListPendingCharges :many
-- The processor charges of rides whose refund is pending: their refunds may
-- be made at the processor and not recorded yet (reconciliation).
SELECT rides.stripe_charge_id::text
FROM refunds
JOIN rides ON rides.id = refunds.ride_id
WHERE refunds.status = 'pending' AND rides.stripe_charge_id IS NOT NULL;

-- name: RefundGetByIdempotencyKey :one
-- The refund a key asked for, with the processor of its ride ('keys show').
SELECT refunds.ride_id, rides.processor FROM refunds
JOIN rides ON rides.id = refunds.ride_id
WHERE refunds.idempotency_key_id = @idempotency_key_id;

-- name: RefundRecordExternal :one
-- Records a refund made outside the service (the processor's dashboard) on a
-- ride that has no refund row: refunded at once, asked for by no request.
INSERT INTO refunds (ride_id, status, stripe_refund_id, amount_cents, currency)
VALUES (@ride_id, 'refunded', @stripe_refund_id::text, @amount_cents, @currency)
RETURNING *;
