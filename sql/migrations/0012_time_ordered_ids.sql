-- Ride, rider and API key ids grow with time and keep a random part, so
-- that a new row lands at the right edge of its primary-key index (inserts
-- touch a few hot pages instead of scattering over the whole index, and a
-- table of ten million rides costs a new ride what an empty one does),
-- while an id is still never handed out again:
--
--   id = (milliseconds since 2026-01-01 UTC) * 4096 + 12 random bits
--
-- A restore or a promoted standby goes back in data, not in time: every id
-- it draws carries a later millisecond than every id of the commits it
-- lost, so no client-held id can name another object. Two rows drawn in
-- the same millisecond meet with probability 1 in 4096 per pair; the
-- primary key refuses the second and the service runs the transaction
-- again, drawing anew (service.isRetryable), as with 0007's draws. The 41
-- bits of milliseconds last until 2095 and keep every id below 2^53, exact
-- in a JavaScript number. Ids drawn by 0007 stay valid: the ranges are
-- disjoint only by chance, and the primary key settles any meeting.
CREATE OR REPLACE FUNCTION random_id() RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$
    SELECT (floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1767225600000) * 4096
           + ('x' || substr(replace(gen_random_uuid()::text, '-', ''), 19, 3))::bit(12)::bigint
$$;
