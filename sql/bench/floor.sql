-- The floor: the least SQL that one ride needs, on the service's own tables,
-- with no service in front of it. Two commits, as the design prescribes:
--
--   1. the idempotency key (claimed, leased, at ride_created), the ride and
--      its audit record;
--   2. the charge id on the ride, the receipt job (a River row, unique key
--      and all) and the finished key with its stored 201.
--
-- The Stripe call between the two is left out: this is the database's floor.
-- Run by the benchmark in the root package as
--   pgbench -n -M prepared -f sql/bench/floor.sql -D users=N …
-- pgbench counts one run of the script as one transaction: tps is rides/s.

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
