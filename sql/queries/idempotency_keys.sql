-- name: IdempotencyKeyGet :one
-- A read without a lock, for replays and for deciding whether a claim is
-- needed, with the database's clock (db_now) that judges the key's lease.
SELECT sqlc.embed(idempotency_keys), now()::timestamptz AS db_now
FROM idempotency_keys
WHERE user_id = @user_id AND idempotency_key = @idempotency_key;

-- name: IdempotencyKeyGetByID :one
SELECT * FROM idempotency_keys WHERE id = @id;

-- name: IdempotencyKeyInsert :one
-- Inserts a new key already leased to the caller, at the database's clock.
-- On a conflict it returns no row; a concurrent inserter blocks here until
-- the first one commits or rolls back.
INSERT INTO idempotency_keys (
    idempotency_key, last_run_at, locked_at, lock_token,
    flow, request_method, request_path, request_params, request_fingerprint, request_ip,
    recovery_point, user_id
) VALUES (
    @idempotency_key, now(), now(), @lock_token::uuid,
    @flow, @request_method, @request_path, @request_params, @request_fingerprint, @request_ip,
    'started', @user_id
)
ON CONFLICT (user_id, idempotency_key) DO NOTHING
RETURNING *;

-- name: IdempotencyKeyLockByUserKey :one
-- Locks the key for a claim, with the database's clock (db_now) that judges
-- the key's lease.
SELECT sqlc.embed(idempotency_keys), now()::timestamptz AS db_now
FROM idempotency_keys
WHERE user_id = @user_id AND idempotency_key = @idempotency_key
FOR UPDATE;

-- name: IdempotencyKeyLockByID :one
SELECT * FROM idempotency_keys WHERE id = @id FOR UPDATE;

-- name: IdempotencyKeyLease :one
-- Takes the lease of a locked (FOR UPDATE) unfinished key, at the database's
-- clock.
UPDATE idempotency_keys
SET locked_at = now(), lock_token = @lock_token::uuid, last_run_at = now()
WHERE id = @id AND recovery_point <> 'finished'
RETURNING *;

-- name: IdempotencyKeyFence :one
-- Locks the key for a phase, only while the caller still holds the lease.
SELECT id FROM idempotency_keys
WHERE id = @id AND lock_token = @lock_token::uuid
FOR UPDATE;

-- name: IdempotencyKeySetRecoveryPoint :execrows
UPDATE idempotency_keys
SET recovery_point = @recovery_point
WHERE id = @id AND lock_token = @lock_token::uuid;

-- name: IdempotencyKeyFinish :execrows
UPDATE idempotency_keys
SET recovery_point = 'finished',
    response_code = @response_code,
    response_body = @response_body,
    locked_at = NULL,
    lock_token = NULL
WHERE id = @id AND lock_token = @lock_token::uuid;

-- name: IdempotencyKeyRelease :execrows
UPDATE idempotency_keys
SET locked_at = NULL, lock_token = NULL
WHERE id = @id AND lock_token = @lock_token::uuid;

-- name: IdempotencyKeyListAbandoned :many
-- Unfinished keys that nobody works on: no live lease (lease_seconds), and
-- idle for idle_seconds, so that their clients had their chance to retry
-- first; both judged by the database's clock. Served
-- by the partial index idempotency_keys_unfinished; SKIP LOCKED passes over
-- keys that a request or another completer holds at this moment.
SELECT id FROM idempotency_keys
WHERE recovery_point <> 'finished'
  AND last_run_at < now() - make_interval(secs => @idle_seconds::float8)
  AND (locked_at IS NULL OR locked_at < now() - make_interval(secs => @lease_seconds::float8))
ORDER BY last_run_at
LIMIT @max_keys
FOR UPDATE SKIP LOCKED;

-- name: IdempotencyKeyDeleteFinished :execrows
-- Deletes one batch of finished keys older than retention_seconds by the
-- database's clock, oldest first, through the partial index
-- idempotency_keys_finished_created_at.
DELETE FROM idempotency_keys
WHERE id IN (
    SELECT id FROM idempotency_keys
    WHERE recovery_point = 'finished'
      AND created_at < now() - make_interval(secs => @retention_seconds::float8)
    ORDER BY created_at
    LIMIT @max_keys
    FOR UPDATE SKIP LOCKED
);

-- name: IdempotencyKeyList :many
-- Unfinished keys for an operator, oldest activity first: those idle for
-- idle_seconds (stuck) or older than retention_seconds (past the retention
-- horizon, which the reaper never deletes), by the database's clock.
SELECT * FROM idempotency_keys
WHERE recovery_point <> 'finished'
  AND (last_run_at < now() - make_interval(secs => @idle_seconds::float8)
       OR created_at < now() - make_interval(secs => @retention_seconds::float8))
ORDER BY last_run_at
LIMIT @max_keys;

-- name: IdempotencyKeyCountUnfinishedBefore :one
SELECT count(*)::bigint FROM idempotency_keys
WHERE recovery_point <> 'finished'
  AND created_at < now() - make_interval(secs => @retention_seconds::float8);

-- name: IdempotencyKeyListByIDs :many
SELECT * FROM idempotency_keys WHERE id = ANY(@ids::bigint[]) ORDER BY id;

-- name: IdempotencyKeyListUnfinishedRides :many
-- The client keys and riders of unfinished ride requests: their charges may
-- be made at the processor and not recorded yet (reconciliation).
SELECT k.idempotency_key, u.email
FROM idempotency_keys k
JOIN users u ON u.id = k.user_id
WHERE k.recovery_point <> 'finished' AND k.flow = @flow;

-- name: IdempotencyKeyListUnfinishedRideIDs :many
-- The unfinished ride requests with their client keys and riders, to find
-- the one whose charge a processor event reports (the inbox).
SELECT k.id, k.idempotency_key, u.email
FROM idempotency_keys k
JOIN users u ON u.id = k.user_id
WHERE k.recovery_point <> 'finished' AND k.flow = @flow;
