-- name: APIKeyCreate :one
INSERT INTO api_keys (key_hash, user_id)
VALUES (@key_hash, @user_id)
RETURNING id, created_at, user_id;
