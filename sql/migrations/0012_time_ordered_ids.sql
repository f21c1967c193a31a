-- Ride, rider and API key ids grow with time, so that a new row lands at the
-- right edge of its primary-key index (inserts touch a few hot pages instead
-- of scattering over the whole index, and a table of ten million rides costs
-- a new ride what an empty one does), while an id is still never handed out
-- again:
--
--   id = (milliseconds since 2026-01-01 UTC) * 4096 + (a counter mod 4096)
--
-- A restore or a promoted standby goes back in data, not in time: every id
-- it makes carries a later millisecond than every id of the commits it
-- lost, whatever its counter says, so no client-held id can name another
-- object. Within one millisecond the counter tells ids apart; only a 4,097th
-- id in the same millisecond could meet an earlier one, and then the primary
-- key refuses it and the service runs the transaction again
-- (service.isRetryable), as with 0007's random draws. The 41 bits of
-- milliseconds last until 2095 and keep every id below 2^53, exact in a
-- JavaScript number. The assumption is 0007's plus one: the database
-- servers' clocks do not go back by more than a failover takes. Ids made by
-- 0007 stay valid; the primary key settles any meeting with them.
CREATE SEQUENCE time_id_counter;

CREATE FUNCTION time_id() RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL UNSAFE
AS $$
    SELECT (floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1767225600000) * 4096
           + nextval('time_id_counter') % 4096
$$;

ALTER TABLE rides ALTER COLUMN id SET DEFAULT time_id();
ALTER TABLE users ALTER COLUMN id SET DEFAULT time_id();
ALTER TABLE api_keys ALTER COLUMN id SET DEFAULT time_id();

DROP FUNCTION random_id();
