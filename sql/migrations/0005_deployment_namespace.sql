-- The deployment's namespace at the payment processor: random, made once
-- with the database and kept in it, so that a backup restored or a standby
-- promoted carries it along. Every processor idempotency key and every
-- piece of metadata the service writes is derived from it, so two
-- deployments sharing one Stripe account never collide, and what the
-- service finds at the processor is recognisably its own.
CREATE TABLE deployment (
    -- one row, ever
    singleton  BOOLEAN     PRIMARY KEY DEFAULT true CHECK (singleton),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- 128 bits from PostgreSQL's strong random source, hex
    namespace  TEXT        NOT NULL CHECK (namespace ~ '^[0-9a-f]{32}$')
);

INSERT INTO deployment (namespace)
VALUES (md5(gen_random_uuid()::text || gen_random_uuid()::text));

-- The attempt of a ride's refund at the processor: part of the processor
-- key, raised only after a recorded refusal, so that a refund asked for
-- again after a refusal reaches the processor again.
ALTER TABLE refunds ADD COLUMN attempt INT NOT NULL DEFAULT 0 CHECK (attempt >= 0);
