-- The service's own SQL for one new ride, with no service in front of it:
-- the statements the engine and the ride flow send, in their two
-- transactions, as pgbench can send them. It shows how much of the gap
-- between the service and the floor is the SQL itself; keep it in step with
-- service/ and sql/queries. (River inserts the receipt job with an unnest of
-- arrays; here it is the same row, ON CONFLICT clause and RETURNING.) The
-- service sends BEGIN with the first statement of each transaction and
-- COMMIT with the last, in one pipeline: seven round trips; pgbench sends
-- each statement on its own.
-- Run by the benchmark in the root package as
--   pgbench -n -M prepared -f sql/bench/service.sql -D users=N …
-- One run of the script is one ride: tps is rides/s.

\set uid random(1, :users)
\set n random(1, 9007199254740991)

-- The claim, fused with the first phase.
BEGIN ISOLATION LEVEL READ COMMITTED;
INSERT INTO idempotency_keys (
    idempotency_key, last_run_at, locked_at, lock_token, flow, request_method, request_path,
    request_params, request_fingerprint, request_ip, recovery_point, user_id
) VALUES (
    'service-' || :client_id || '-' || :n, now(), now(), gen_random_uuid(), 'ride.create', 'POST', '/rides',
    '{"origin_lat": 37.7749, "origin_lon": -122.4194, "target_lat": 37.8044, "target_lon": -122.2712}',
    '\x4d0f4ec86f0228eb9f7d55f780091e545b480de711426bc8eeccddb7b61bb2fd', '127.0.0.1', 'started', :uid
)
ON CONFLICT (user_id, idempotency_key) DO NOTHING
RETURNING * \gset key_
-- The ride and its audit record in one statement, with the rider.
WITH ride AS (
    INSERT INTO rides (
        idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon, amount_cents, currency, user_id, payment_source
    ) VALUES (
        :key_id, 37.7749, -122.4194, 37.8044, -122.2712, 2000, 'usd', :uid, (SELECT payment_source FROM users WHERE id = :uid)
    ) RETURNING *
), audit AS (
    INSERT INTO audit_records (action, data, origin_ip, resource_id, resource_type, user_id)
    SELECT 'ride.created',
        '{"origin_lat": 37.7749, "origin_lon": -122.4194, "target_lat": 37.8044, "target_lon": -122.2712}',
        '127.0.0.1', ride.id, 'ride', ride.user_id FROM ride
)
SELECT rides.id AS ride_id, rides.created_at, rides.charge_status, users.email, users.stripe_customer_id
FROM ride AS rides JOIN users ON users.id = rides.user_id \gset
UPDATE idempotency_keys SET recovery_point = 'ride_created'
WHERE id = :key_id AND lock_token = :key_lock_token::uuid;
COMMIT;

-- (The Stripe call.) The charge phase, behind the key's fence.
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT id FROM idempotency_keys WHERE id = :key_id AND lock_token = :key_lock_token::uuid FOR UPDATE;
UPDATE rides SET charge_status = 'charged', stripe_charge_id = 'ch_service_' || :ride_id
WHERE id = :ride_id AND charge_status = 'pending';
INSERT INTO river_job (
    args, kind, max_attempts, priority, queue, state, scheduled_at, tags, unique_key, unique_states, metadata
)
SELECT jsonb_build_object('ride_id', :ride_id::bigint), 'ride_receipt', 25, 1, 'default', 'available', now(), '{}',
    sha256(convert_to('&kind=ride_receipt&args={"ride_id":' || :ride_id || '}', 'UTF8')), B'11110101', '{}'
ON CONFLICT (unique_key)
    WHERE unique_key IS NOT NULL AND unique_states IS NOT NULL AND river_job_state_in_bitmask(unique_states, state)
    DO UPDATE SET kind = river_job.kind
RETURNING *, (xmax != 0) AS unique_skipped_as_duplicate;
UPDATE idempotency_keys
SET recovery_point = 'finished', response_code = 201, locked_at = NULL, lock_token = NULL,
    response_body = convert_to('{"id":' || :ride_id || ',"created_at":"2026-01-01T00:00:00.000000Z","origin_lat":37.7749,"origin_lon":-122.4194,"target_lat":37.8044,"target_lon":-122.2712,"amount_cents":2000,"currency":"usd","charge_status":"charged","stripe_charge_id":"ch_service_' || :ride_id || '"}', 'UTF8')
WHERE id = :key_id AND lock_token = :key_lock_token::uuid;
COMMIT;
