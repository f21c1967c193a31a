-- name: UserGetByEmail :one
-- Addresses are unique case-insensitively (users_email_lower): a rider
-- stored before addresses were lower-cased is found by any case.
SELECT * FROM users WHERE lower(email) = lower(@email);

-- name: UserGet :one
SELECT * FROM users WHERE id = @id;

-- name: UserCreate :one
INSERT INTO users (email, payment_source)
VALUES (@email, @payment_source)
RETURNING *;

-- name: UserSetStripeCustomer :execrows
-- Mirrors the Stripe customer made for payment_source on the user while it
-- is the rider's current source (a customer job or booking that finishes
-- after the source was replaced writes only the source's registration).
UPDATE users
SET stripe_customer_id = @stripe_customer_id::text
WHERE id = @id AND payment_source = @payment_source
  AND stripe_customer_id IS DISTINCT FROM @stripe_customer_id::text;

-- name: UserReplacePaymentSource :one
-- Replaces the rider's payment source. The Stripe customer shown on the
-- user becomes the one already made for the new source, if any (a source
-- the rider comes back to), else none until the customer job records it.
UPDATE users
SET payment_source = @payment_source,
    stripe_customer_id = (
        SELECT r.customer_id FROM processor_registrations r
        WHERE r.user_id = @id AND r.payment_source = @payment_source
          AND r.processor = 'stripe' AND r.status = 'registered')
WHERE id = @id
RETURNING *;

-- name: UserGetByStripeCustomer :one
-- The rider of a Stripe customer, whichever of the rider's sources it was
-- made for.
SELECT * FROM users
WHERE stripe_customer_id = @stripe_customer_id
   OR id = (SELECT r.user_id FROM processor_registrations r
            WHERE r.processor = 'stripe' AND r.customer_id = @stripe_customer_id
            LIMIT 1)
LIMIT 1;

-- name: UserListWithoutStripeCustomer :many
-- Users whose customer is not recorded (a lost commit may have held it).
SELECT id, email FROM users WHERE stripe_customer_id IS NULL AND role = 'rider' ORDER BY id;

-- name: UserListAll :many
-- Every user's id and email: the orphan policy looks for the rider of a
-- charge at a processor whose charges name no customer of ours (rare:
-- once per orphan).
SELECT id, email FROM users WHERE role = 'rider' ORDER BY id;

-- name: ProcessorRegistrationList :many
-- The rider's registrations of its current payment source.
SELECT * FROM processor_registrations
WHERE user_id = @user_id
  AND payment_source = (SELECT payment_source FROM users WHERE id = @user_id)
ORDER BY processor;

-- name: ProcessorRegistrationListForSource :many
-- The rider's registrations of one payment source (a ride's, or a customer
-- job's).
SELECT * FROM processor_registrations
WHERE user_id = @user_id AND payment_source = @payment_source
ORDER BY processor;

-- name: ProcessorRegistrationSetRegistered :execrows
-- Records the rider's card (payment_source) at the processor once; a
-- refusal recorded for the same source is replaced, another customer
-- already recorded is kept (0 rows).
INSERT INTO processor_registrations (user_id, processor, payment_source, status, customer_id)
VALUES (@user_id, @processor, @payment_source, 'registered', @customer_id::text)
ON CONFLICT (user_id, payment_source, processor) DO UPDATE
SET status = 'registered', customer_id = EXCLUDED.customer_id, reason = NULL, updated_at = now()
WHERE processor_registrations.status = 'refused'
   OR processor_registrations.customer_id = EXCLUDED.customer_id;

-- name: ProcessorRegistrationSetRefused :execrows
-- Records the processor's refusal of the rider's source, unless the card is
-- registered there already.
INSERT INTO processor_registrations (user_id, processor, payment_source, status, reason)
VALUES (@user_id, @processor, @payment_source, 'refused', @reason::text)
ON CONFLICT (user_id, payment_source, processor) DO UPDATE
SET reason = EXCLUDED.reason, updated_at = now()
WHERE processor_registrations.status = 'refused';

-- name: UserGetDispatch :one
-- The dispatch side's account: its idempotency keys are its own.
SELECT * FROM users WHERE role = 'dispatch';
