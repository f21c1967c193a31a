-- name: IdempotencyKeyGet :one
-- A read without a lock, for replays and for deciding whether a claim is needed.
SELECT * FROM idempotency_keys
WHERE user_id = @user_id AND idempotency_key = @idempotency_key;

-- name: IdempotencyKeyGetByID :one
SELECT * FROM idempotency_keys WHERE id = @id;

-- name: IdempotencyKeyInsert :one
-- Inserts a new key already leased to the caller. On a conflict it returns no
-- row; a concurrent inserter blocks here until the first one commits or rolls
-- back.
INSERT INTO idempotency_keys (
    idempotency_key, last_run_at, locked_at, lock_token,
    flow, request_method, request_path, request_params, request_fingerprint, request_ip,
    recovery_point, user_id
) VALUES (
    @idempotency_key, @now, @now, @lock_token::uuid,
    @flow, @request_method, @request_path, @request_params, @request_fingerprint, @request_ip,
    'started', @user_id
)
ON CONFLICT (user_id, idempotency_key) DO NOTHING
RETURNING *;

-- name: IdempotencyKeyLockByUserKey :one
SELECT * FROM idempotency_keys
WHERE user_id = @user_id AND idempotency_key = @idempotency_key
FOR UPDATE;

-- name: IdempotencyKeyLockByID :one
SELECT * FROM idempotency_keys WHERE id = @id FOR UPDATE;

-- name: IdempotencyKeyLease :one
-- Takes the lease of a locked (FOR UPDATE) unfinished key.
UPDATE idempotency_keys
SET locked_at = @now::timestamptz, lock_token = @lock_token::uuid, last_run_at = @now
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
