-- A single-row primary-key select of an idempotency key, the stored
-- response included: the database's floor for a replay.
-- Run by the benchmark in the root package as
--   pgbench -n -M prepared -f sql/bench/select.sql -D maxid=N …

\set id random(1, :maxid)
SELECT * FROM idempotency_keys WHERE id = :id;
