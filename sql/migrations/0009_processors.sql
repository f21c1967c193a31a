-- Two payment processors. A ride's processor is chosen once, before its
-- first call, and committed with the ride at the recovery point
-- ride_created: every continuation (a client's retry, the completer, a
-- refund, reconciliation) reads it here and goes back to that processor
-- with the same key, never to another.
--
-- rides.processor names where the ride's charge is made (stripe_charge_id
-- then holds that processor's id of the charge: a Stripe charge id or an
-- Adyen pspReference), and refunds.stripe_refund_id holds the refund's id
-- at the same processor. charge_attempt counts the processors the ride was
-- routed to: it grows only after a definitive "not charged" (the rider's
-- source refused at the processor), recorded in the same commit as the new
-- choice.
ALTER TABLE rides
    ADD COLUMN processor      TEXT NOT NULL DEFAULT 'stripe'
        CHECK (processor IN ('stripe', 'adyen')),
    ADD COLUMN charge_attempt INT  NOT NULL DEFAULT 1
        CHECK (charge_attempt BETWEEN 1 AND 10);

-- A rider's card at each processor: registered (with the processor's id of
-- the stored card: a Stripe customer, an Adyen storedPaymentMethodId) or
-- refused (with the processor's reason). A refusal is the rider's state,
-- shown on GET /users/{email}, never an operator's configuration error;
-- the rider recovers by registering another source, which clears the rows.
-- The Stripe customer id stays in users.stripe_customer_id as well.
CREATE TABLE processor_registrations (
    user_id        BIGINT      NOT NULL REFERENCES users ON DELETE CASCADE,
    processor      TEXT        NOT NULL CHECK (processor IN ('stripe', 'adyen')),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    status         TEXT        NOT NULL CHECK (status IN ('registered', 'refused')),
    customer_id    TEXT        CHECK (char_length(customer_id) BETWEEN 1 AND 255),
    reason         TEXT        CHECK (char_length(reason) BETWEEN 1 AND 500),
    PRIMARY KEY (user_id, processor),
    CONSTRAINT processor_registrations_registered CHECK ((status = 'registered') = (customer_id IS NOT NULL)),
    CONSTRAINT processor_registrations_refused CHECK ((status = 'refused') = (reason IS NOT NULL))
);
