-- name: NotifiedChargeRecord :execrows
-- Records a charge a processor notified; one already recorded writes
-- nothing (0 rows), but for the rider a capture notified first lacked.
INSERT INTO notified_charges (processor, charge_id, charge_key, rider_ref, amount_cents, currency, charged_at, hold)
VALUES (@processor, @charge_id, @charge_key, @rider_ref, @amount_cents, @currency, @charged_at, @hold)
ON CONFLICT (processor, charge_id) DO UPDATE SET rider_ref = EXCLUDED.rider_ref
WHERE notified_charges.rider_ref = '' AND EXCLUDED.rider_ref <> '';

-- name: NotifiedChargeSetReleased :execrows
-- The orphan pass released a notified hold whose booking was lost.
UPDATE notified_charges SET released_at = now()
WHERE processor = @processor AND charge_id = @charge_id AND hold AND released_at IS NULL;

-- name: NotifiedChargeListSince :many
-- The charges of a processor notified as made at or after since.
SELECT * FROM notified_charges WHERE processor = @processor AND charged_at >= @since ORDER BY charged_at;

-- name: NotifiedChargeGet :one
SELECT * FROM notified_charges WHERE processor = @processor AND charge_id = @charge_id;

-- name: NotifiedChargeListByKey :many
-- The charges the processor's notifications recorded under a charge key:
-- the look-up of a processor that lists no payments.
SELECT * FROM notified_charges WHERE processor = @processor AND charge_key = @charge_key ORDER BY charged_at;

-- name: NotifiedRefundRecord :execrows
-- Records a refund a processor notified; one already recorded writes
-- nothing (0 rows).
INSERT INTO notified_refunds (processor, refund_id, charge_id, amount_cents, refunded_at)
VALUES (@processor, @refund_id, @charge_id, @amount_cents, @refunded_at)
ON CONFLICT (processor, refund_id) DO NOTHING;

-- name: NotifiedRefundListOfRidesSince :many
-- The refunds of a processor notified as made at or after since whose
-- charge a ride records.
SELECT n.* FROM notified_refunds n
WHERE n.processor = @processor AND n.refunded_at >= @since
  AND EXISTS (SELECT 1 FROM rides r WHERE r.stripe_charge_id = n.charge_id AND r.processor = n.processor)
ORDER BY n.refunded_at;

-- name: NotifiedChargeCaptured :execrows
-- A processor notified the capture of a payment no ride records (a hold
-- whose booking and completion a restore lost): the payment is a charge of
-- what was captured, for the orphan policy to refund, whether or not its
-- AUTHORISATION was recorded first.
INSERT INTO notified_charges (processor, charge_id, charge_key, rider_ref, amount_cents, currency, charged_at, hold)
VALUES (@processor, @charge_id, @charge_key, '', @amount_cents, @currency, @charged_at, false)
ON CONFLICT (processor, charge_id) DO UPDATE
SET hold = false, amount_cents = EXCLUDED.amount_cents, released_at = NULL;
