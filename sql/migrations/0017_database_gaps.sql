-- The database's own record of its recent past, so that a restore or a
-- failover that lost commits is noticed before a client's retry is sent
-- to a processor that may have forgotten its key.
--
-- database_heartbeat is one row that every serving process moves to now()
-- every second. A database that comes back from a backup, or a standby
-- promoted while behind, holds a beat older than stale_after: commits made
-- since that beat may be lost, and a request first sent to a processor in
-- that interval has no row that knows it. The first beat that finds the
-- row stale records the interval in database_gaps. Until the orphan pass
-- has covered a gap (resolved_at), a key is taken as first sent no later
-- than the gap's lost_from (database_lost_from()).
--
-- beat_at is NULL until a process first serves the database: a database
-- no process has served has lost nothing a retry could miss.
CREATE TABLE database_heartbeat (
    id          BOOLEAN PRIMARY KEY DEFAULT true CHECK (id),
    beat_at     TIMESTAMPTZ,
    stale_after INTERVAL NOT NULL DEFAULT '3 seconds' CHECK (stale_after > '0'::interval)
);
INSERT INTO database_heartbeat DEFAULT VALUES;

CREATE TABLE database_gaps (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The newest beat the database held when the gap was found: every
    -- commit lost to it was made after this.
    lost_from   TIMESTAMPTZ NOT NULL,
    found_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- When the orphan pass had seen every charge made in the gap.
    resolved_at TIMESTAMPTZ,
    CHECK (lost_from <= found_at)
);
CREATE INDEX database_gaps_unresolved ON database_gaps (lost_from) WHERE resolved_at IS NULL;

-- The earliest moment a request this database does not know of may have
-- been first sent to a processor: the oldest unresolved gap, or the
-- heartbeat itself while it is stale and no beat has recorded the gap yet;
-- NULL when neither. Read with the phase that decides a processor call.
CREATE FUNCTION database_lost_from() RETURNS TIMESTAMPTZ
LANGUAGE sql STABLE AS $$
    SELECT least(
        (SELECT min(lost_from) FROM database_gaps WHERE resolved_at IS NULL),
        (SELECT beat_at FROM database_heartbeat WHERE beat_at < now() - stale_after))
$$;

-- A processor that lists no payments (Adyen) is asked for a payment by
-- its key through the charges its notifications recorded: the look-up
-- before a key past the processor's window is sent again.
CREATE INDEX notified_charges_charge_key ON notified_charges (processor, charge_key);
