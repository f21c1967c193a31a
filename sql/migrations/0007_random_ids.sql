-- Ids that a client holds never name another object: not after a restore
-- from a backup, not after a standby promoted while behind. A sequence
-- restored with the data hands out again every id it gave the lost commits,
-- so a client retrying a request about a lost ride (POST /rides/{id}/refund)
-- would name whichever ride got the id next, and a receipt's Message-ID,
-- made from the ride id, would repeat. Rides, riders and API keys are
-- therefore numbered by random draws instead: a draw cannot be replayed by
-- a restore.
--
-- An id is a uniform random integer in [1, 2^53 - 1], exact in a JavaScript
-- number (and in the spec's int64). Two draws meet with probability about
-- n / 2^53 for a table of n rows (1 in 9 million with a billion rides); the
-- primary key refuses the second, and the service runs the transaction
-- again, drawing anew (service.isRetryable).
--
-- Ids that never leave the database (idempotency keys, refunds, audit
-- records, receipts) stay sequential: the service never takes them from a
-- client.

-- random_id draws an id from PostgreSQL's strong random source: the 56 bits
-- of a version-4 UUID's last 14 hex digits, all random, reduced to the
-- range (a bias of 2^-53 towards the smallest ids).
CREATE FUNCTION random_id() RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$
    SELECT 1 + ('x' || substr(replace(gen_random_uuid()::text, '-', ''), 19, 14))::bit(56)::bigint
               % 9007199254740991
$$;

ALTER TABLE rides ALTER COLUMN id SET DEFAULT random_id();
ALTER TABLE users ALTER COLUMN id SET DEFAULT random_id();
ALTER TABLE api_keys ALTER COLUMN id SET DEFAULT random_id();

-- Nothing numbers these tables by sequence any more.
DROP SEQUENCE rides_id_seq;
DROP SEQUENCE users_id_seq;
DROP SEQUENCE api_keys_id_seq;

-- Every id, older sequential ones included, is exact in a JavaScript number.
ALTER TABLE rides ADD CONSTRAINT rides_id_range CHECK (id BETWEEN 1 AND 9007199254740991);
ALTER TABLE users ADD CONSTRAINT users_id_range CHECK (id BETWEEN 1 AND 9007199254740991);
ALTER TABLE api_keys ADD CONSTRAINT api_keys_id_range CHECK (id BETWEEN 1 AND 9007199254740991);
