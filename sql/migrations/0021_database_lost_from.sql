-- database_lost_from() is read by every booking's first phase. As a SQL
-- function with sub-selects it cannot be inlined, and PostgreSQL plans its
-- body again on every call, even from a prepared statement. In PL/pgSQL
-- its two queries are planned once per connection and kept; what it
-- returns is unchanged.
CREATE OR REPLACE FUNCTION database_lost_from() RETURNS TIMESTAMPTZ
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN least(
        (SELECT min(lost_from) FROM database_gaps WHERE resolved_at IS NULL),
        (SELECT beat_at FROM database_heartbeat WHERE beat_at < now() - stale_after));
END
$$;
