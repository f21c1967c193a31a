-- The seed's design: the four SERIALIZABLE atomic phases of one ride in the
-- reference implementation (rocket-rides-atomic), on the service's own
-- tables, with no service in front of it:
--
--   1. look the key up; insert it (or re-lock an unfinished one);
--   2. the ride, its audit record, recovery point ride_created;
--   3. (the Stripe call) the charge id on the ride, recovery point
--      charge_created;
--   4. the receipt job (a River row), the finished key with its stored 201.
--
-- A serialization failure is retried, as a client of the seed retries with
-- the same key: pgbench reruns the script (with --max-tries) with the same
-- random draws, so the same key, and the script resumes from the key's
-- recovery point, at once (backoff_ms=0, as the seed suggests: "just retry
-- the operation right away") or after a jittered pause of up to backoff_ms
-- milliseconds (a client backing off). The seed's extra work on a failure (a
-- 409 to the client, an UPDATE unlocking the key, a new HTTP request) is left
-- out, and so is its per-request user lookup: both favour the seed.
-- Run by the benchmark in the root package as
--   pgbench -n -M prepared --max-tries N -f sql/bench/seed.sql -D users=N -D backoff_ms=M …
-- One run of the script is one ride: tps is rides/s.

\set uid random(1, :users)
\set n random(1, 9007199254740991)

-- Phase 1. rp: 0 started, 1 ride_created, 2 charge_created, 3 finished.
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT coalesce(max(id), 0) AS key_id,
       coalesce(max(CASE recovery_point WHEN 'started' THEN 0 WHEN 'ride_created' THEN 1
                                        WHEN 'charge_created' THEN 2 ELSE 3 END), 0) AS rp
FROM idempotency_keys
WHERE user_id = :uid::bigint AND idempotency_key = 'seed-' || :client_id::text || '-' || :n::text \gset
\set found :key_id
\if :found = 0
INSERT INTO idempotency_keys (
    idempotency_key, locked_at, lock_token, flow, request_method, request_path,
    request_params, request_fingerprint, request_ip, recovery_point, user_id
) VALUES (
    'seed-' || :client_id::text || '-' || :n::text, now(), gen_random_uuid(), 'ride.create', 'POST', '/rides',
    '{"origin_lat": 37.7749, "origin_lon": -122.4194, "target_lat": 37.8044, "target_lon": -122.2712}',
    '\x4d0f4ec86f0228eb9f7d55f780091e545b480de711426bc8eeccddb7b61bb2fd', '127.0.0.1',
    'started', :uid::bigint
) RETURNING id AS key_id \gset
\elif :rp < 3
UPDATE idempotency_keys SET last_run_at = now(), locked_at = now(), lock_token = gen_random_uuid()
WHERE id = :key_id::bigint;
\endif
COMMIT;
\if :found > 0 and :backoff_ms > 0
-- A retry: the client backs off before it resumes.
\set backoff random(1, :backoff_ms)
\sleep :backoff ms
\endif

-- Phase 2.
\if :rp = 0
BEGIN ISOLATION LEVEL SERIALIZABLE;
INSERT INTO rides (
    idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon, amount_cents, currency, user_id, payment_source
) VALUES (
    :key_id::bigint, 37.7749, -122.4194, 37.8044, -122.2712, 2000, 'usd', :uid::bigint, (SELECT payment_source FROM users WHERE id = :uid::bigint)
) RETURNING id AS ride_id \gset
INSERT INTO audit_records (action, data, origin_ip, resource_id, resource_type, user_id)
VALUES ('ride.created',
    '{"origin_lat": 37.7749, "origin_lon": -122.4194, "target_lat": 37.8044, "target_lon": -122.2712}',
    '127.0.0.1', :ride_id::bigint, 'ride', :uid::bigint);
UPDATE idempotency_keys SET recovery_point = 'ride_created' WHERE id = :key_id::bigint;
COMMIT;
\set rp 1
\elif :rp < 3
-- Recovering: the ride was created by an earlier try.
SELECT id AS ride_id FROM rides WHERE idempotency_key_id = :key_id::bigint \gset
\endif

-- Phase 3 (the seed calls Stripe inside this transaction).
\if :rp = 1
BEGIN ISOLATION LEVEL SERIALIZABLE;
UPDATE rides SET charge_status = 'charged', stripe_charge_id = 'ch_seed_' || :ride_id::text
WHERE id = :ride_id::bigint;
UPDATE idempotency_keys SET recovery_point = 'charge_created' WHERE id = :key_id::bigint;
COMMIT;
\set rp 2
\endif

-- Phase 4.
\if :rp = 2
BEGIN ISOLATION LEVEL SERIALIZABLE;
INSERT INTO river_job (
    args, kind, max_attempts, priority, queue, state, scheduled_at, tags, unique_key, unique_states, metadata
) VALUES (
    jsonb_build_object('ride_id', :ride_id::bigint), 'ride_receipt', 25, 1, 'default', 'available', now(), '{}',
    sha256(convert_to('&kind=ride_receipt&args={"ride_id":' || :ride_id::text || '}', 'UTF8')), B'11110101', '{}'
);
UPDATE idempotency_keys
SET recovery_point = 'finished', response_code = 201, locked_at = NULL, lock_token = NULL,
    response_body = convert_to('{"id":' || :ride_id::text || ',"created_at":"2026-01-01T00:00:00.000000Z","origin_lat":37.7749,"origin_lon":-122.4194,"target_lat":37.8044,"target_lon":-122.2712,"amount_cents":2000,"currency":"usd","charge_status":"charged","stripe_charge_id":"ch_seed_' || :ride_id::text || '"}', 'UTF8')
WHERE id = :key_id::bigint;
COMMIT;
\endif
