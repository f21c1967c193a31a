-- name: SettlementFileGetByNameSHA :one
SELECT id, name, version, status FROM settlement_files WHERE name = @name AND sha256 = @sha256;

-- name: SettlementFileCreate :one
-- Records a new version of the named file: version 1 for a new name, the
-- next one (flagged) for a name already seen. The caller serialises
-- concurrent receipts of one name through the unique constraints.
INSERT INTO settlement_files (name, sha256, version, content, flagged, flag_reason)
SELECT @name, @sha256, v.next, @content, v.next > 1,
       CASE WHEN v.next > 1 THEN 'version ' || v.next || ' of ' || @name::text || ': the bank uploaded this name again with other content' END
FROM (SELECT coalesce(max(version), 0) + 1 AS next FROM settlement_files WHERE name = @name) v
RETURNING id, name, version, status, flagged;

-- name: SettlementFileGet :one
SELECT * FROM settlement_files WHERE id = @id;

-- name: SettlementFileLock :one
SELECT * FROM settlement_files WHERE id = @id FOR UPDATE;

-- name: SettlementFileAdvance :execrows
-- Moves the cursor from from_line to to_line with the counts of the lines
-- the batch applied; it touches nothing when another run moved it first.
UPDATE settlement_files
SET cursor_line = @to_line, updated_at = now(),
    lines_applied = lines_applied + @applied::int,
    lines_duplicate = lines_duplicate + @duplicate::int,
    lines_quarantined = lines_quarantined + @quarantined::int
WHERE id = @id AND cursor_line = @from_line AND status = 'pending';

-- name: SettlementFileFinish :execrows
UPDATE settlement_files SET status = 'applied', finished_at = now(), updated_at = now()
WHERE id = @id AND status = 'pending';

-- name: SettlementFileReject :execrows
UPDATE settlement_files
SET status = 'rejected', problem = @problem::text, finished_at = now(), updated_at = now(),
    flagged = true, flag_reason = coalesce(flag_reason || '; ', '') || 'rejected: ' || @problem::text
WHERE id = @id AND status = 'pending';

-- name: SettlementFileList :many
SELECT id, created_at, name, version, status, problem, cursor_line, lines_applied,
       lines_duplicate, lines_quarantined, flagged, flag_reason, finished_at,
       octet_length(content)::bigint AS size_bytes
FROM settlement_files ORDER BY id DESC LIMIT @max_rows;

-- name: SettlementFileCountByStatus :many
SELECT status, flagged, count(*)::bigint AS n FROM settlement_files GROUP BY status, flagged;

-- name: SettlementLineInsert :one
-- Applies one line unless a line with its reference and type was applied
-- before (then no row).
INSERT INTO settlement_lines (
    file_id, line_number, processor_reference, type, balance_transaction_id,
    transaction_created_at, gross_cents, fee_cents, net_cents, currency, batch,
    payout_id, payout_effective_at, match, mismatch, ride_id, refund_id
) VALUES (
    @file_id, @line_number, @processor_reference, @type, @balance_transaction_id,
    @transaction_created_at, @gross_cents, @fee_cents, @net_cents, @currency, @batch,
    @payout_id, @payout_effective_at, @match, @mismatch, @ride_id, @refund_id
)
ON CONFLICT (processor_reference, type) DO NOTHING
RETURNING id;

-- name: SettlementLineGetByReference :one
SELECT l.*, f.name AS file_name, f.version AS file_version
FROM settlement_lines l JOIN settlement_files f ON f.id = l.file_id
WHERE l.processor_reference = @processor_reference AND l.type = @type;

-- name: SettlementLineListByFile :many
SELECT * FROM settlement_lines WHERE file_id = @file_id ORDER BY line_number;

-- name: SettlementLineListDiscrepancies :many
-- Lines of the bank's that settle nothing of ours, or settle it differently.
SELECT l.*, f.name AS file_name, f.version AS file_version
FROM settlement_lines l JOIN settlement_files f ON f.id = l.file_id
WHERE l.match IN ('unknown', 'mismatch')
ORDER BY l.id DESC LIMIT @max_rows;

-- name: SettlementLineCountByMatch :many
SELECT match, count(*)::bigint AS n FROM settlement_lines GROUP BY match;

-- name: SettlementLineTotals :one
-- Sums of every applied line, for checks against the bank's files.
SELECT count(*)::bigint AS lines, coalesce(sum(gross_cents), 0)::bigint AS gross_cents,
       coalesce(sum(fee_cents), 0)::bigint AS fee_cents, coalesce(sum(net_cents), 0)::bigint AS net_cents
FROM settlement_lines;

-- name: SettlementQuarantineInsert :execrows
INSERT INTO settlement_quarantined_lines (file_id, line_number, reason, raw)
VALUES (@file_id, @line_number, @reason, @raw)
ON CONFLICT (file_id, line_number) DO NOTHING;

-- name: SettlementQuarantineListByFile :many
SELECT * FROM settlement_quarantined_lines WHERE file_id = @file_id ORDER BY line_number;

-- name: SettlementQuarantineCount :one
SELECT count(*)::bigint FROM settlement_quarantined_lines;

-- name: SettlementRideByCharge :one
-- The ride, and its refund if any, that a charge or refund line names.
-- A completed trip's charge settles what was captured of its hold; the
-- payment of its fare above the hold settles that part.
SELECT r.id AS ride_id, coalesce(r.captured_cents, r.amount_cents)::bigint AS amount_cents, r.currency, r.charge_status
FROM rides r WHERE r.stripe_charge_id = @stripe_charge_id::text
UNION ALL
SELECT r.id, r.extra_cents::bigint, r.currency, r.charge_status
FROM rides r WHERE r.extra_charge_id = @stripe_charge_id::text
LIMIT 1;

-- name: SettlementRefundByProcessorID :one
SELECT f.id AS refund_id, f.ride_id, f.amount_cents, f.currency, f.status
FROM refunds f WHERE f.stripe_refund_id = @stripe_refund_id::text;

-- name: SettlementMissingList :many
-- Charges and refunds of ours older than max_age that no settlement line
-- settles. Only objects made since the first settlement file was received
-- (less max_age) are judged, so that turning the feature on does not report
-- the whole history.
WITH bounds AS (
    SELECT (SELECT min(sf.created_at) FROM settlement_files sf) - make_interval(0, 0, 0, 0, 0, 0, @max_age_seconds::float8) AS since,
           now() - make_interval(0, 0, 0, 0, 0, 0, @max_age_seconds::float8) AS before
)
SELECT 'charge'::text AS type, r.stripe_charge_id::text AS processor_reference, r.id AS ride_id,
       -- a completed trip settles what was captured of its hold
       coalesce(r.captured_cents, r.amount_cents)::bigint AS amount_cents, r.currency, r.created_at
FROM rides r, bounds b
WHERE r.charge_status IN ('charged', 'completed') AND r.created_at >= b.since AND r.created_at < b.before
  AND NOT EXISTS (SELECT 1 FROM settlement_lines l
                  WHERE l.processor_reference = r.stripe_charge_id AND l.type = 'charge')
UNION ALL
SELECT 'refund'::text, f.stripe_refund_id::text, f.ride_id, f.amount_cents, f.currency, f.created_at
FROM refunds f, bounds b
WHERE f.status = 'refunded' AND f.created_at >= b.since AND f.created_at < b.before
  AND NOT EXISTS (SELECT 1 FROM settlement_lines l
                  WHERE l.processor_reference = f.stripe_refund_id AND l.type = 'refund')
ORDER BY 6 LIMIT @max_rows;

-- name: SettlementListByRide :many
-- What the bank settled of one ride: its charge line and its refund's.
SELECT l.*, f.name AS file_name, f.version AS file_version
FROM settlement_lines l JOIN settlement_files f ON f.id = l.file_id
WHERE l.ride_id = @ride_id ORDER BY l.id;
