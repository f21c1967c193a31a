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
