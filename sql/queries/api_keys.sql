-- name: APIKeyCreate :one
INSERT INTO api_keys (key_hash, user_id)
VALUES (@key_hash, @user_id)
RETURNING id, created_at, user_id;

-- name: APIKeyList :many
-- Every key of the user, revoked ones included, oldest first; never the hash.
SELECT id, created_at, last_used_at, revoked_at
FROM api_keys
WHERE user_id = @user_id
ORDER BY created_at, id;

-- name: APIKeyRevoke :one
-- Revokes a live key of the user. No row: the key is unknown, another user's,
-- or already revoked.
UPDATE api_keys
SET revoked_at = now()
WHERE id = @id AND user_id = @user_id AND revoked_at IS NULL
RETURNING id, revoked_at;

-- name: APIKeyGetForUser :one
SELECT id, created_at, last_used_at, revoked_at
FROM api_keys
WHERE id = @id AND user_id = @user_id;

-- name: APIKeyLive :one
-- Whether the key exists and is not revoked.
SELECT EXISTS (SELECT 1 FROM api_keys WHERE id = @id AND revoked_at IS NULL);

-- name: APIKeyAuthenticate :one
-- The rider of a live key, found by the key's hash. Recording the use is
-- folded in, and writes only when the recorded use is over a minute old, so a
-- key in constant use costs one row update a minute and every other lookup
-- stays a read.
WITH used AS (
    UPDATE api_keys
    SET last_used_at = now()
    WHERE api_keys.key_hash = @key_hash
      AND api_keys.revoked_at IS NULL
      AND (api_keys.last_used_at IS NULL OR api_keys.last_used_at < now() - interval '1 minute')
)
SELECT sqlc.embed(users), api_keys.id AS api_key_id
FROM api_keys
JOIN users ON users.id = api_keys.user_id
WHERE api_keys.key_hash = @key_hash
  AND api_keys.revoked_at IS NULL;
