-- Bookings pay through each processor's rider-present payments API (Stripe
-- PaymentIntents confirmed on-session; Adyen /payments with the shopper
-- present and a return URL), where the rider's bank may ask to
-- authenticate the payment before it decides.
--
-- payment_api is the API a ride's charge request goes to, committed with
-- the ride before any call: a continuation sends the same request to the
-- same API, so a booking in flight when the service was upgraded finishes
-- on the API it started with. Rides booked before this migration are
-- 'charges' (Stripe's Charges API; Adyen's merchant-initiated payment).
ALTER TABLE rides
    ADD COLUMN payment_api TEXT NOT NULL DEFAULT 'charges'
        CHECK (payment_api IN ('charges', 'payment_intents'));
ALTER TABLE rides ALTER COLUMN payment_api SET DEFAULT 'payment_intents';

-- A ride whose bank asked for authentication waits in requires_action for
-- its rider, then moves once: to charged, declined, or expired (the payment
-- cancelled at the processor after its deadline).
--
-- payment_id is the processor's payment (a Stripe PaymentIntent; an Adyen
-- pspReference once known); null for Charges API rides, whose charge is
-- the payment. charge_key is the processor key the payment was requested
-- under (its metadata ar_key, Adyen's merchant reference): events and the
-- rider's return find the waiting ride by it (the newest ride of the key). action_url and
-- action_client_secret are what the rider must do; action_expires_at is
-- the deadline after which the payment is cancelled.
ALTER TABLE rides DROP CONSTRAINT rides_charge_status_check;
ALTER TABLE rides
    ADD CONSTRAINT rides_charge_status_check
        CHECK (charge_status IN ('pending', 'requires_action', 'charged', 'declined', 'expired')),
    ADD COLUMN payment_id TEXT CHECK (char_length(payment_id) BETWEEN 1 AND 255),
    ADD COLUMN charge_key TEXT CHECK (char_length(charge_key) BETWEEN 1 AND 255),
    ADD COLUMN action_url TEXT CHECK (char_length(action_url) BETWEEN 1 AND 2048),
    ADD COLUMN action_client_secret TEXT CHECK (char_length(action_client_secret) BETWEEN 1 AND 255),
    ADD COLUMN action_expires_at TIMESTAMPTZ,
    ADD COLUMN action_decided_at TIMESTAMPTZ,
    ADD CONSTRAINT rides_action_has_deadline CHECK (
        charge_status <> 'requires_action' OR (charge_key IS NOT NULL AND action_expires_at IS NOT NULL)
    );

CREATE UNIQUE INDEX rides_payment_id ON rides (processor, payment_id) WHERE payment_id IS NOT NULL;
-- Not unique: once its idempotency key is reaped (after the processor
-- forgot it too), a client may send the same key again, a new booking
-- under the same processor key.
CREATE INDEX rides_charge_key ON rides (charge_key, created_at) WHERE charge_key IS NOT NULL;
CREATE INDEX rides_requires_action ON rides (action_expires_at) WHERE charge_status = 'requires_action';
