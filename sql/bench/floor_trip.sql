-- The floor of a trip: the least SQL that one trip needs (a ride booked
-- under CAPTURE=trip, its fare held, then completed by the dispatch side and
-- its fare captured), on the service's own tables, with no service in front
-- of it. Four commits, as the design prescribes:
--
--   1. the booking's idempotency key (claimed, leased, at ride_created), the
--      ride (capture trip) and its audit record;
--   2. the hold recorded: the ride authorized with its payment, its charge
--      and until when the hold is kept, and the finished key with its
--      stored 201;
--   3. the completion's idempotency key (the dispatch side's, claimed,
--      leased, at capture_requested), the ride locked and read (its status,
--      currency and hold judge the fare), moved to capturing with its fare,
--      and the audit record of the completion;
--   4. the capture recorded and the ride completed (one update: the fare is
--      within the hold, nothing above it to charge), the receipt job (a River
--      row, unique key and all) and the completion's finished key with its
--      stored 201.
--
-- The processor's calls between them (the hold, then the capture) are left
-- out, and so is the receipt's delivery (see floor_receipt.sql for its
-- least SQL): this is the database's floor of a trip, as floor.sql is a
-- ride's.
-- Run by the benchmark in the root package as
--   pgbench -n -M prepared -f sql/bench/floor_trip.sql -D users=N -D dispatch=ID …
-- where ID is the dispatch side's account (the migrated database's user of
-- role dispatch). One run of the script is one trip: tps is trips/s.

\set uid random(1, :users)
\set n random(1, 9007199254740991)

-- 1. The booking.
BEGIN;
INSERT INTO idempotency_keys (
    idempotency_key, locked_at, lock_token, flow, request_method, request_path,
    request_params, request_fingerprint, request_ip, recovery_point, user_id
) VALUES (
    'floor-trip-' || :client_id || '-' || :n, now(), gen_random_uuid(), 'ride.create', 'POST', '/rides',
    '{"origin_lat": 37.7749, "origin_lon": -122.4194, "target_lat": 37.8044, "target_lon": -122.2712}',
    '\x4d0f4ec86f0228eb9f7d55f780091e545b480de711426bc8eeccddb7b61bb2fd', '127.0.0.1',
    'ride_created', :uid
) RETURNING id AS key_id, lock_token AS token \gset
INSERT INTO rides (
    idempotency_key_id, origin_lat, origin_lon, target_lat, target_lon, amount_cents, currency, user_id, capture, payment_source
) VALUES (
    :key_id, 37.7749, -122.4194, 37.8044, -122.2712, 2000, 'usd', :uid, 'trip', (SELECT payment_source FROM users WHERE id = :uid)
) RETURNING id AS ride_id \gset
INSERT INTO audit_records (action, data, origin_ip, resource_id, resource_type, user_id)
VALUES ('ride.created',
    '{"origin_lat": 37.7749, "origin_lon": -122.4194, "target_lat": 37.8044, "target_lon": -122.2712}',
    '127.0.0.1', :ride_id, 'ride', :uid);
COMMIT;

-- 2. The hold recorded.
BEGIN;
UPDATE rides
SET charge_status = 'authorized', stripe_charge_id = 'ch_floor_' || :ride_id, payment_id = 'pi_floor_' || :ride_id,
    charge_key = 'ar_floor_' || :ride_id, hold_expires_at = now() + interval '24 hours'
WHERE id = :ride_id AND charge_status = 'pending';
UPDATE idempotency_keys
SET recovery_point = 'finished', response_code = 201, locked_at = NULL, lock_token = NULL,
    response_body = convert_to('{"id":' || :ride_id || ',"created_at":"2026-01-01T00:00:00.000000Z","origin_lat":37.7749,"origin_lon":-122.4194,"target_lat":37.8044,"target_lon":-122.2712,"amount_cents":2000,"currency":"usd","charge_status":"authorized","stripe_charge_id":"ch_floor_' || :ride_id || '","capture":"trip","hold_expires_at":"2026-01-02T00:00:00.000000Z"}', 'UTF8')
WHERE id = :key_id AND lock_token = :token;
COMMIT;

-- 3. The completion's claim: the ride moves to capturing with its fare.
BEGIN;
INSERT INTO idempotency_keys (
    idempotency_key, locked_at, lock_token, flow, request_method, request_path,
    request_params, request_fingerprint, request_ip, recovery_point, user_id
) VALUES (
    'floor-trip-done-' || :client_id || '-' || :n, now(), gen_random_uuid(), 'ride.complete', 'POST', '/rides/' || :ride_id || '/complete',
    ('{"ride_id": ' || :ride_id || ', "fare_cents": 1850, "currency": "usd"}')::jsonb,
    '\x9b2c4ad1f0e3a86d37e5c2b1d4f60a8e7c3b5d9f1e2a4c6b8d0f1e3a5c7b9d2f', '127.0.0.1',
    'capture_requested', :dispatch
) RETURNING id AS done_key_id, lock_token AS done_token \gset
SELECT charge_status, currency, amount_cents FROM rides WHERE id = :ride_id FOR UPDATE;
UPDATE rides
SET charge_status = 'capturing', fare_cents = 1850, completion_key_id = :done_key_id, completion_requested_at = now()
WHERE id = :ride_id AND charge_status = 'authorized';
INSERT INTO audit_records (action, data, origin_ip, resource_id, resource_type, user_id)
VALUES ('ride.completion_requested', '{"fare_cents": 1850, "held_cents": 2000, "extra_cents": null}',
    '127.0.0.1', :ride_id, 'ride', :uid);
COMMIT;

-- 4. (The capture.) The capture recorded, the ride completed, its receipt
-- job, the completion's finished key.
BEGIN;
UPDATE rides
SET captured_cents = 1850, capture_id = 'ch_floor_' || :ride_id, extra_status = 'none',
    charge_status = 'completed', completed_at = now()
WHERE id = :ride_id AND charge_status = 'capturing';
INSERT INTO river_job (
    args, kind, max_attempts, priority, queue, state, scheduled_at, tags, unique_key, unique_states, metadata
) VALUES (
    jsonb_build_object('ride_id', :ride_id::bigint), 'ride_receipt', 25, 1, 'default', 'available', now(), '{}',
    sha256(convert_to('&kind=ride_receipt&args={"ride_id":' || :ride_id || '}', 'UTF8')), B'11110101', '{}'
);
UPDATE idempotency_keys
SET recovery_point = 'finished', response_code = 201, locked_at = NULL, lock_token = NULL,
    response_body = convert_to('{"id":' || :ride_id || ',"created_at":"2026-01-01T00:00:00.000000Z","origin_lat":37.7749,"origin_lon":-122.4194,"target_lat":37.8044,"target_lon":-122.2712,"amount_cents":2000,"currency":"usd","charge_status":"completed","stripe_charge_id":"ch_floor_' || :ride_id || '","capture":"trip","fare_cents":1850,"amount_captured_cents":1850,"extra_status":"none","completed_at":"2026-01-01T00:20:00.000000Z"}', 'UTF8')
WHERE id = :done_key_id AND lock_token = :done_token;
COMMIT;
