-- Refunds of rides. A ride is refunded at most once: ride_id is UNIQUE, so
-- every request to refund a ride, under whatever idempotency key, converges
-- on one row here, and every call to Stripe for it uses the entity-level key
-- "ride-<id>-refund", so Stripe makes at most one refund of the charge.
CREATE TABLE refunds (
    id                 BIGSERIAL   PRIMARY KEY,
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at         TIMESTAMPTZ NOT NULL DEFAULT now(),

    ride_id            BIGINT      NOT NULL UNIQUE REFERENCES rides ON DELETE RESTRICT,

    -- The key of the request that asked for the refund (answered 201; any
    -- other key gets the same refund with 200). Keys are reaped eventually;
    -- refunds stay.
    idempotency_key_id BIGINT      REFERENCES idempotency_keys ON DELETE SET NULL,

    -- pending from the request until Stripe's answer is recorded; refunded
    -- with Stripe's refund id; failed when Stripe refused the refund
    -- definitively (a later request may try again).
    status             TEXT        NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'refunded', 'failed')),
    stripe_refund_id   TEXT        UNIQUE
        CHECK (char_length(stripe_refund_id) BETWEEN 1 AND 255),
    failure_code       TEXT
        CHECK (char_length(failure_code) BETWEEN 1 AND 255),

    -- a full refund of the ride's charge
    amount_cents       BIGINT      NOT NULL CHECK (amount_cents > 0),
    currency           TEXT        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),

    CONSTRAINT refunds_refunded_has_refund CHECK (
        (status = 'refunded') = (stripe_refund_id IS NOT NULL)
    ),
    CONSTRAINT refunds_failed_has_code CHECK (
        (status = 'failed') = (failure_code IS NOT NULL)
    )
);

-- Backs ON DELETE SET NULL when the reaper deletes keys.
CREATE INDEX refunds_idempotency_key_id ON refunds (idempotency_key_id)
    WHERE idempotency_key_id IS NOT NULL;
