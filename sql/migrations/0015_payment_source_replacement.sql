-- A rider replaces its payment source (PUT /users/{email} with another
-- payment_source). Each source is registered at every processor under its
-- own entity-level key, a pure function of the namespace, the rider's email
-- and the source (processor_keys.go), so the registrations are kept per
-- source: the rider's state at a processor is the row of its current
-- source (users.payment_source), and a source the rider comes back to
-- (A -> B -> A) finds the answers the processors gave it.
ALTER TABLE processor_registrations ADD COLUMN payment_source TEXT;

UPDATE processor_registrations r
SET payment_source = u.payment_source
FROM users u
WHERE u.id = r.user_id;

-- Stripe customers recorded before processor_registrations existed.
INSERT INTO processor_registrations (user_id, processor, status, customer_id, payment_source)
SELECT id, 'stripe', 'registered', stripe_customer_id, payment_source
FROM users
WHERE stripe_customer_id IS NOT NULL
ON CONFLICT (user_id, processor) DO NOTHING;

ALTER TABLE processor_registrations
    ALTER COLUMN payment_source SET NOT NULL,
    ADD CONSTRAINT processor_registrations_payment_source_length
        CHECK (char_length(payment_source) BETWEEN 1 AND 255),
    DROP CONSTRAINT processor_registrations_pkey,
    ADD PRIMARY KEY (user_id, payment_source, processor);

-- The rider of a customer (or stored card) at a processor, whichever source
-- it was made for (orphan charges name the customer they charged).
CREATE INDEX processor_registrations_customer
    ON processor_registrations (processor, customer_id) WHERE customer_id IS NOT NULL;

-- users.stripe_customer_id is the Stripe customer of the rider's current
-- source: cleared when the source is replaced, set again by the customer
-- job (or to the customer already made for a source the rider comes back
-- to).

-- The payment source a ride was routed with, committed with the ride at its
-- recovery point (ride_created) before any call: every continuation charges
-- that source, through the customer or stored card made for it, with the
-- same processor key, whatever the rider's source is by then.
ALTER TABLE rides ADD COLUMN payment_source TEXT;

UPDATE rides
SET payment_source = u.payment_source
FROM users u
WHERE u.id = rides.user_id;

ALTER TABLE rides
    ALTER COLUMN payment_source SET NOT NULL,
    ADD CONSTRAINT rides_payment_source_length
        CHECK (char_length(payment_source) BETWEEN 1 AND 255);
