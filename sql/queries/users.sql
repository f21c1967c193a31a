-- name: UserGetByEmail :one
SELECT * FROM users WHERE email = @email;

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

-- name: UserGetByAPIKeyHash :one
SELECT users.*
FROM api_keys
JOIN users ON users.id = api_keys.user_id
WHERE api_keys.key_hash = @key_hash;
