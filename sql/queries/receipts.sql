-- name: ReceiptGet :one
SELECT * FROM receipts WHERE ride_id = @ride_id AND kind = @kind;

-- name: ReceiptRecord :execrows
-- Records a sent receipt; recording it twice is a no-op.
INSERT INTO receipts (kind, ride_id, message_id, recipient, sent_at)
VALUES (@kind, @ride_id, @message_id, @recipient, @sent_at)
ON CONFLICT DO NOTHING;

-- name: ReceiptCountByKind :many
SELECT kind, count(*)::bigint AS sent FROM receipts GROUP BY kind ORDER BY kind;
