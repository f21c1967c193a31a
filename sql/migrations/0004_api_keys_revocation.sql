-- Revocable API keys, and one rider per mailbox.

-- A revoked key authenticates nothing; its row stays, for the audit trail and
-- so that a repeated revocation is recognised. last_used_at is when the key
-- last authenticated a request, written at most once a minute per key.
ALTER TABLE api_keys
    ADD COLUMN revoked_at   TIMESTAMPTZ,
    ADD COLUMN last_used_at TIMESTAMPTZ;

-- Every instance trusts a key it has read for a few seconds. A key that stops
-- authenticating (revoked, or deleted with its rider) is announced on the
-- channel api_key_revoked, its SHA-256 in hex as payload, when the change
-- commits; each instance's listener forgets the key on hearing it.
CREATE FUNCTION api_keys_notify_revoked() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('api_key_revoked', encode(OLD.key_hash, 'hex'));
    RETURN NULL;
END
$$;

CREATE TRIGGER api_keys_revoked
    AFTER UPDATE OF revoked_at ON api_keys
    FOR EACH ROW
    WHEN (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL)
    EXECUTE FUNCTION api_keys_notify_revoked();

CREATE TRIGGER api_keys_deleted
    AFTER DELETE ON api_keys
    FOR EACH ROW
    EXECUTE FUNCTION api_keys_notify_revoked();

-- One rider per mailbox: the service stores addresses lower-cased, and this
-- index refuses two addresses that differ only in case whatever wrote them.
-- On a database that already holds such a pair it fails, naming the address:
-- an operator must merge those riders first.
CREATE UNIQUE INDEX users_email_lower ON users (lower(email));
