-- name: ReceiptRecord :execrows
-- Records a sent receipt; recording it twice is a no-op.
INSERT INTO receipts (kind, ride_id, message_id, recipient, sent_at)
VALUES (@kind, @ride_id, @message_id, @recipient, @sent_at)
ON CONFLICT DO NOTHING;

-- name: ReceiptCountByKind :many
SELECT kind, count(*)::bigint AS sent FROM receipts GROUP BY kind ORDER BY kind;

-- name: ReceiptSubject :one
-- Everything a receipt needs in one read: the ride, its rider's email, and
-- whether the receipt of this kind was already sent.
SELECT sqlc.embed(rides), users.email,
       EXISTS (SELECT 1 FROM receipts WHERE receipts.ride_id = rides.id AND receipts.kind = @kind) AS sent
FROM rides JOIN users ON users.id = rides.user_id
WHERE rides.id = @ride_id;
