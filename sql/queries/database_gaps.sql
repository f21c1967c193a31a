-- name: DatabaseHeartbeat :one
-- Moves the heartbeat to now and, when the beat it replaces is stale (a
-- restore or a failover brought back an older database, or no process beat
-- for a while), records the interval since that beat as a gap. Returns
-- whether it found a gap and its lost_from, and the gaps still open (the
-- new one included). Concurrent beats serialise
-- on the row: only the first one after a gap records it.
WITH beat AS (
    SELECT beat_at, stale_after FROM database_heartbeat FOR UPDATE
), gap AS (
    INSERT INTO database_gaps (lost_from)
    SELECT least(beat.beat_at, now()) FROM beat WHERE beat.beat_at < now() - beat.stale_after
    RETURNING lost_from
), moved AS (
    UPDATE database_heartbeat SET beat_at = greatest(database_heartbeat.beat_at, now())
    RETURNING beat_at
)
SELECT EXISTS (SELECT 1 FROM gap) AS found,
    coalesce((SELECT lost_from FROM gap), (SELECT beat_at FROM moved))::timestamptz AS lost_from,
    (SELECT beat_at FROM moved)::timestamptz AS beat_at,
    -- the statement's snapshot does not see the row gap inserts
    (SELECT count(*) FROM database_gaps WHERE resolved_at IS NULL) + (SELECT count(*) FROM gap) AS open_gaps;

-- name: DatabaseLostFrom :one
-- The earliest moment a request this database lost may have been first
-- sent to a processor (database_lost_from()); gap_open is false, and
-- lost_from now, when no gap is open.
SELECT (gap.lost_from IS NOT NULL)::boolean AS gap_open, coalesce(gap.lost_from, now())::timestamptz AS lost_from
FROM (SELECT database_lost_from() AS lost_from) AS gap;

-- name: DatabaseGapsResolve :execrows
-- Resolves the gaps found before covered_until: the orphan pass has seen
-- every charge made in them.
UPDATE database_gaps SET resolved_at = now()
WHERE resolved_at IS NULL AND found_at < @covered_until;

-- name: DatabaseGapsResolveEmpty :execrows
-- Resolves the gaps found before covered_until, from listed_since on, in
-- which no charge that no ride records was made (unrecorded: their
-- creation times), each gap widened by skew_seconds for the processors'
-- clocks: nothing was lost in them that a retry could find.
UPDATE database_gaps g SET resolved_at = now()
WHERE g.resolved_at IS NULL AND g.found_at < @covered_until
  AND g.lost_from - make_interval(secs => @skew_seconds::float8) >= @listed_since
  AND NOT EXISTS (
    SELECT 1 FROM unnest(@unrecorded::timestamptz[]) AS u(created)
    WHERE u.created >= g.lost_from - make_interval(secs => @skew_seconds::float8)
      AND u.created <= g.found_at + make_interval(secs => @skew_seconds::float8));
