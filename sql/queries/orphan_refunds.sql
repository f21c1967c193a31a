-- name: OrphanRefundRecord :execrows
-- Records an orphan charge to refund under its charge id; a charge already
-- recorded writes nothing (0 rows).
INSERT INTO orphan_refunds (stripe_charge_id, charge_key, rider_ref, amount_cents, currency, charge_created_at, user_id, email,
                            processor, reason, ride_id)
VALUES (@stripe_charge_id, @charge_key, @rider_ref, @amount_cents, @currency, @charge_created_at, sqlc.narg(user_id), sqlc.narg(email),
        @processor, @reason, sqlc.narg(ride_id))
ON CONFLICT (stripe_charge_id) DO NOTHING;

-- name: OrphanRefundGet :one
SELECT * FROM orphan_refunds WHERE stripe_charge_id = @stripe_charge_id;

-- name: OrphanRefundGetByChargeKey :one
-- The refunded orphan charge made under a processor key, if any.
SELECT * FROM orphan_refunds WHERE charge_key = @charge_key AND status = 'refunded'
ORDER BY created_at LIMIT 1;

-- name: OrphanRefundSetRefunded :execrows
UPDATE orphan_refunds SET status = 'refunded', stripe_refund_id = @stripe_refund_id, refunded_at = now()
WHERE stripe_charge_id = @stripe_charge_id AND status = 'pending';

-- name: OrphanRefundSetFailed :execrows
UPDATE orphan_refunds SET status = 'failed'
WHERE stripe_charge_id = @stripe_charge_id AND status = 'pending';

-- name: OrphanRefundSetReceiptSent :execrows
UPDATE orphan_refunds SET receipt_sent_at = @sent_at::timestamptz
WHERE stripe_charge_id = @stripe_charge_id AND receipt_sent_at IS NULL;

-- name: OrphanRefundListResolved :many
-- Of the given processor charge ids, those refunded as orphans
-- (reconciliation).
SELECT stripe_charge_id FROM orphan_refunds
WHERE stripe_charge_id = ANY(@stripe_charge_ids::text[]) AND status = 'refunded';

-- name: OrphanRefundListRecordedRefunds :many
-- Of the given processor refund ids, those an orphan refund records
-- (reconciliation).
SELECT stripe_refund_id::text FROM orphan_refunds
WHERE stripe_refund_id = ANY(@stripe_refund_ids::text[]);

-- name: OrphanRefundExistsForUser :one
-- Whether the user has a refunded orphan charge, and whether the database
-- may have lost an earlier send of a request (database_gaps.sql) and since
-- when: what a booking resumed after its ride was created checks before
-- its charge call.
SELECT EXISTS (SELECT 1 FROM orphan_refunds WHERE user_id = @user_id AND status = 'refunded') AS refunded_orphans,
    (gap.lost_from IS NOT NULL)::boolean AS gap_open, coalesce(gap.lost_from, now())::timestamptz AS gap_lost_from
FROM (SELECT database_lost_from() AS lost_from) AS gap;

-- name: OrphanRefundCountUnresolved :many
-- Orphan and double charges recorded but not refunded (pending, or failed
-- for an operator), by reason: the gauge of unresolved charges.
SELECT reason, status, count(*) AS n FROM orphan_refunds
WHERE status <> 'refunded' GROUP BY reason, status;

-- name: OrphanRefundRecordRefundedBefore :execrows
-- Records an orphan charge the processor has refunded already, as resolved
-- with that refund; a charge already recorded writes nothing (0 rows).
INSERT INTO orphan_refunds (stripe_charge_id, charge_key, rider_ref, amount_cents, currency, charge_created_at,
                            user_id, email, status, stripe_refund_id, refunded_at, refunded_before,
                            processor, reason, ride_id)
VALUES (@stripe_charge_id, @charge_key, @rider_ref, @amount_cents, @currency, @charge_created_at,
        sqlc.narg(user_id), sqlc.narg(email), 'refunded', @stripe_refund_id, now(), true,
        @processor, @reason, sqlc.narg(ride_id))
ON CONFLICT (stripe_charge_id) DO NOTHING;
