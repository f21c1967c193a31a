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
-- Stores the customer once; a second writer with the same id is a no-op and a
-- different id is refused (0 rows).
UPDATE users
SET stripe_customer_id = @stripe_customer_id::text
WHERE id = @id
  AND (stripe_customer_id IS NULL OR stripe_customer_id = @stripe_customer_id);

-- name: UserGetByStripeCustomer :one
SELECT * FROM users WHERE stripe_customer_id = @stripe_customer_id;

-- name: UserListWithoutStripeCustomer :many
-- Users whose customer is not recorded (a lost commit may have held it).
SELECT id, email FROM users WHERE stripe_customer_id IS NULL ORDER BY id;

-- name: UserListAll :many
-- Every user's id and email: the orphan policy looks for the rider of a
-- charge at a processor whose charges name no customer of ours (rare:
-- once per orphan).
SELECT id, email FROM users ORDER BY id;

-- name: ProcessorRegistrationList :many
SELECT * FROM processor_registrations WHERE user_id = @user_id ORDER BY processor;

-- name: ProcessorRegistrationSetRegistered :execrows
-- Records the rider's card at the processor once; a refusal recorded for
-- the same source is replaced, another customer already recorded is kept
-- (0 rows).
INSERT INTO processor_registrations (user_id, processor, status, customer_id)
VALUES (@user_id, @processor, 'registered', @customer_id::text)
ON CONFLICT (user_id, processor) DO UPDATE
SET status = 'registered', customer_id = EXCLUDED.customer_id, reason = NULL, updated_at = now()
WHERE processor_registrations.status = 'refused'
   OR processor_registrations.customer_id = EXCLUDED.customer_id;

-- name: ProcessorRegistrationSetRefused :execrows
-- Records the processor's refusal of the rider's source, unless the card is
-- registered there already.
INSERT INTO processor_registrations (user_id, processor, status, reason)
VALUES (@user_id, @processor, 'refused', @reason::text)
ON CONFLICT (user_id, processor) DO UPDATE
SET reason = EXCLUDED.reason, updated_at = now()
WHERE processor_registrations.status = 'refused';
