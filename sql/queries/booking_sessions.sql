-- name: BookingSessionCreate :exec
-- Opens a session for an API key that has just authenticated.
INSERT INTO booking_sessions (id_hash, api_key_id, expires_at)
VALUES (@id_hash, @api_key_id, now() + make_interval(secs => @idle_seconds::float8));

-- name: BookingSessionAuthenticate :one
-- The rider of a live session whose API key is live (not revoked: the rule
-- of APIKeyLive, joined here so that one read answers). Using the session
-- moves its expiry forward (bounded by its absolute lifetime), writing at
-- most once a minute per session.
WITH touched AS (
    UPDATE booking_sessions
    SET expires_at = least(booking_sessions.created_at + make_interval(secs => @max_age_seconds::float8),
                           now() + make_interval(secs => @idle_seconds::float8))
    WHERE booking_sessions.id_hash = @id_hash
      AND booking_sessions.expires_at > now()
      AND booking_sessions.expires_at < now() + make_interval(secs => @idle_seconds::float8) - interval '1 minute'
)
SELECT sqlc.embed(users)
FROM booking_sessions
JOIN api_keys ON api_keys.id = booking_sessions.api_key_id
JOIN users ON users.id = api_keys.user_id
WHERE booking_sessions.id_hash = @id_hash
  AND booking_sessions.expires_at > now()
  AND api_keys.revoked_at IS NULL;

-- name: BookingSessionDelete :exec
DELETE FROM booking_sessions WHERE id_hash = @id_hash;

-- name: BookingSessionDeleteExpired :execrows
-- Deletes up to max_rows sessions that have expired.
DELETE FROM booking_sessions
WHERE id_hash IN (
    SELECT id_hash FROM booking_sessions
    WHERE expires_at <= now()
    ORDER BY expires_at
    LIMIT @max_rows
);
