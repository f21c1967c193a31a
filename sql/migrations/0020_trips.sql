-- A ride's money follows the trip. A ride booked with capture 'trip' holds
-- its quoted fare (amount_cents) when it is booked (authorized, nothing
-- captured), then moves once:
--
--   authorized -> capturing -> completed      the dispatch side completed
--                            \-> capture_failed  the trip; its fare is captured
--   authorized -> cancelling -> cancelled     the rider or dispatch cancelled
--                             \-> expired      nobody ended it before
--                                              hold_expires_at
--
-- capturing and cancelling are the recovery points of the processor calls:
-- the phase that moves a ride there commits before the call, under the
-- ride's lock, so a completion and a cancellation racing each other see one
-- another and exactly one wins. Rides booked before this migration, and
-- deployments that still capture at booking, are 'booking': charged at
-- once, as before.
ALTER TABLE rides
    ADD COLUMN capture TEXT NOT NULL DEFAULT 'booking' CHECK (capture IN ('booking', 'trip'));

ALTER TABLE rides DROP CONSTRAINT rides_charge_status_check;
ALTER TABLE rides DROP CONSTRAINT rides_charged_has_charge;
ALTER TABLE rides
    ADD CONSTRAINT rides_charge_status_check CHECK (charge_status IN (
        'pending', 'requires_action', 'charged', 'declined', 'expired',
        'authorized', 'capturing', 'completed', 'capture_failed', 'cancelling', 'cancelled'
    )),
    -- Every ride whose payment went through has its charge (an authorized
    -- hold at Stripe has its uncaptured charge; at Adyen the charge is the
    -- payment); a ride never charged has none. An expired ride has one when
    -- its hold expired, none when its rider never authenticated.
    ADD CONSTRAINT rides_charged_has_charge CHECK (
        (charge_status NOT IN ('charged', 'authorized', 'capturing', 'completed', 'capture_failed', 'cancelling', 'cancelled')
            OR stripe_charge_id IS NOT NULL)
        AND (charge_status NOT IN ('pending', 'requires_action', 'declined') OR stripe_charge_id IS NULL)
    ),
    ADD CONSTRAINT rides_trip_states CHECK (
        capture = 'trip'
        OR charge_status NOT IN ('authorized', 'capturing', 'completed', 'capture_failed', 'cancelling', 'cancelled')
    ),
    -- until when the hold is kept: past it, the hold-release job releases it
    ADD COLUMN hold_expires_at TIMESTAMPTZ,
    ADD CONSTRAINT rides_authorized_has_expiry CHECK (charge_status <> 'authorized' OR hold_expires_at IS NOT NULL),

    -- Completion: the fare the dispatch side sent, under which key, and
    -- what the processor captured of the hold (null until it says so; at
    -- Adyen the CAPTURE notification tells it).
    ADD COLUMN fare_cents BIGINT CHECK (fare_cents > 0),
    ADD COLUMN completion_key_id BIGINT,
    ADD COLUMN completion_requested_at TIMESTAMPTZ,
    ADD COLUMN captured_cents BIGINT CHECK (captured_cents > 0),
    ADD COLUMN capture_id TEXT CHECK (char_length(capture_id) BETWEEN 1 AND 255),
    ADD COLUMN capture_failure TEXT CHECK (char_length(capture_failure) BETWEEN 1 AND 255),
    ADD COLUMN completed_at TIMESTAMPTZ,
    ADD CONSTRAINT rides_completion_has_fare CHECK (
        charge_status NOT IN ('capturing', 'completed', 'capture_failed') OR fare_cents IS NOT NULL
    ),
    ADD CONSTRAINT rides_completed_captured CHECK (charge_status <> 'completed' OR captured_cents IS NOT NULL),

    -- The fare above the hold (extra_cents = fare - hold) is a payment of
    -- its own, made without the rider: extra_status is null until the
    -- completion decided it, then none (the fare was within the hold),
    -- charged, due (the payment failed: the rider owes it, and books
    -- nothing until it is paid) or paid (the rider paid it later).
    ADD COLUMN extra_cents BIGINT CHECK (extra_cents > 0),
    ADD COLUMN extra_status TEXT CHECK (extra_status IN ('none', 'charged', 'due', 'paid')),
    ADD COLUMN extra_charge_id TEXT CHECK (char_length(extra_charge_id) BETWEEN 1 AND 255),
    ADD COLUMN extra_failure_code TEXT CHECK (char_length(extra_failure_code) BETWEEN 1 AND 255),
    ADD COLUMN balance_attempt INT NOT NULL DEFAULT 0 CHECK (balance_attempt >= 0),
    ADD CONSTRAINT rides_extra_charged CHECK (
        extra_status IS NULL OR extra_status IN ('none', 'due') OR extra_charge_id IS NOT NULL
    ),
    ADD CONSTRAINT rides_completed_extra_decided CHECK (charge_status <> 'completed' OR extra_status IS NOT NULL),

    -- Cancellation and expiry: why the hold is released, and when it was.
    ADD COLUMN release_reason TEXT CHECK (release_reason IN ('cancelled', 'expired')),
    ADD COLUMN released_at TIMESTAMPTZ,
    ADD COLUMN cancel_key_id BIGINT,
    ADD CONSTRAINT rides_release_has_reason CHECK (charge_status <> 'cancelling' OR release_reason IS NOT NULL);

-- Holds to release (the hold-release job's scan) and holds outstanding
-- (the operators' gauges).
CREATE INDEX rides_holds ON rides (hold_expires_at) WHERE charge_status IN ('authorized', 'cancelling');
-- Trips not ended, or whose capture waits or failed: the operators' gauges
-- (RideTripGauges, with rides_balance_due) read them without a scan.
CREATE INDEX rides_trips_open ON rides (charge_status)
    WHERE charge_status IN ('authorized', 'cancelling', 'capturing', 'capture_failed');
-- The ride of a fare's payment above its hold (events and reconciliation
-- find it by its charge).
CREATE UNIQUE INDEX rides_extra_charge_id ON rides (extra_charge_id) WHERE extra_charge_id IS NOT NULL;
-- A rider's balances due: the booking phase's check.
CREATE INDEX rides_balance_due ON rides (user_id) WHERE extra_status = 'due';
-- The ride of a capture (Adyen's CAPTURE notification names it).
CREATE UNIQUE INDEX rides_capture_id ON rides (processor, capture_id) WHERE capture_id IS NOT NULL;

-- A processor's notified charges (Adyen's AUTHORISATIONs) may be holds: a
-- hold whose booking was lost is released, not refunded, and released_at
-- says the orphan pass released it.
ALTER TABLE notified_charges
    ADD COLUMN hold BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN released_at TIMESTAMPTZ;

-- The dispatch side (DISPATCH_TOKEN) completes and cancels rides under its
-- own idempotency keys: its keys belong to this account, which rides,
-- customers and the orphan policy never see as a rider.
ALTER TABLE users
    ADD COLUMN role TEXT NOT NULL DEFAULT 'rider' CHECK (role IN ('rider', 'dispatch'));
CREATE UNIQUE INDEX users_one_dispatch ON users (role) WHERE role = 'dispatch';
INSERT INTO users (email, payment_source, role) VALUES ('dispatch@atomicrides.invalid', 'none', 'dispatch');
