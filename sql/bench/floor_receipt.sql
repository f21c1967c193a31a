-- The floor with the receipt: the floor (floor.sql), then the least SQL of
-- the ride's receipt, as the service's background work does it with River:
--
--   3. fetch an available receipt job (the queue's fetch: the oldest
--      available job, skipping locked ones, marked running), its own commit;
--   4. record the receipt and complete the job, in one commit (River's
--      JobCompleteTx).
--
-- The mail itself is left out: this is the database's floor of a ride and
-- its receipt, the baseline of the service's database CPU per ride.
-- Run by the benchmark in the root package as
--   pgbench -n -M prepared -f sql/bench/floor_receipt.sql -D users=N …
-- One run of the script is one ride and one receipt: tps is rides/s.

\set uid random(1, :users)
\set n random(1, 9007199254740991)

BEGIN;
INSERT INTO idempotency_keys (
    idempotency_key, locked_at, lock_token, flow, request_method, request_path,
    request_params, request_fingerprint, request_ip, recovery_point, user_id
) VALUES (
    'floor-' || :client_id || '-' || :n, now(), gen_random_uuid(), 'ride.create', 'POST', '/rides',
    '{"origin_lat": 37.7749, "origin_lon": -122.4194, "target_lat": 37.8044, "target_lon": -122.2712}',
    '\x4d0f4ec86f0228eb9f7d55f780091e545b480de711426bc8eeccddb7b61bb2fd', '127.0.0.1',
    'ride_created', :uid
) RETURNING id AS key_id, lock_token AS token \gset
INSERT INTO rides (
    idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon, amount_cents, currency, user_id, payment_source
) VALUES (
    :key_id, 37.7749, -122.4194, 37.8044, -122.2712, 2000, 'usd', :uid, (SELECT payment_source FROM users WHERE id = :uid)
) RETURNING id AS ride_id \gset
INSERT INTO audit_records (action, data, origin_ip, resource_id, resource_type, user_id)
VALUES ('ride.created',
    '{"origin_lat": 37.7749, "origin_lon": -122.4194, "target_lat": 37.8044, "target_lon": -122.2712}',
    '127.0.0.1', :ride_id, 'ride', :uid);
COMMIT;

BEGIN;
UPDATE rides SET charge_status = 'charged', stripe_charge_id = 'ch_floor_' || :ride_id
WHERE id = :ride_id AND charge_status = 'pending';
INSERT INTO river_job (
    args, kind, max_attempts, priority, queue, state, scheduled_at, tags, unique_key, unique_states, metadata
) VALUES (
    jsonb_build_object('ride_id', :ride_id::bigint), 'ride_receipt', 25, 1, 'default', 'available', now(), '{}',
    sha256(convert_to('&kind=ride_receipt&args={"ride_id":' || :ride_id || '}', 'UTF8')), B'11110101', '{}'
);
UPDATE idempotency_keys
SET recovery_point = 'finished', response_code = 201, locked_at = NULL, lock_token = NULL,
    response_body = convert_to('{"id":' || :ride_id || ',"created_at":"2026-01-01T00:00:00.000000Z","origin_lat":37.7749,"origin_lon":-122.4194,"target_lat":37.8044,"target_lon":-122.2712,"amount_cents":2000,"currency":"usd","charge_status":"charged","stripe_charge_id":"ch_floor_' || :ride_id || '"}', 'UTF8')
WHERE id = :key_id AND lock_token = :token;
COMMIT;

-- A client fetches a job inserted by any client: every client inserted one
-- before it fetches, so one is there; the script tolerates none all the same.
WITH job AS (
    UPDATE river_job
    SET state = 'running', attempt = attempt + 1, attempted_at = now(), attempted_by = array_append(attempted_by, 'bench')
    WHERE id = (
        SELECT id FROM river_job
        WHERE state = 'available' AND queue = 'default' AND scheduled_at <= now()
        ORDER BY priority, scheduled_at, id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    )
    RETURNING id, (args->>'ride_id')::bigint AS ride_id
)
SELECT coalesce(max(id), 0) AS job_id, coalesce(max(ride_id), 0) AS receipt_ride FROM job \gset

\if :job_id > 0
BEGIN;
INSERT INTO receipts (kind, ride_id, message_id, recipient, sent_at)
VALUES ('ride', :receipt_ride, 'receipt.ride-' || :receipt_ride || '@atomicrides.localhost', 'rider@bench.example.com', now())
ON CONFLICT DO NOTHING;
UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = :job_id AND state = 'running';
COMMIT;
\endif
