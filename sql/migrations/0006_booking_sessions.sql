-- Sessions of the booking pages. The cookie holds a random session id; only
-- its SHA-256 is stored. A session belongs to the API key the rider signed in
-- with and ends with it: deleted with the key, and refused once the key is
-- revoked (api_keys.revoked_at, migration 0004). expires_at moves forward
-- with use, up to a fixed bound from created_at: a session ends after a
-- while unused or after its absolute lifetime, whichever comes first.
-- Signing out deletes the row.
CREATE TABLE booking_sessions (
    id_hash    BYTEA       PRIMARY KEY CHECK (octet_length(id_hash) = 32),
    api_key_id BIGINT      NOT NULL REFERENCES api_keys ON DELETE CASCADE,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL
);

CREATE INDEX booking_sessions_api_key_id ON booking_sessions (api_key_id);
CREATE INDEX booking_sessions_expires_at ON booking_sessions (expires_at);
