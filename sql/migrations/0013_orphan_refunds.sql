-- Orphan refunds: a charge of this deployment that no ride records (its
-- booking lost with a restore, its client never back) is refunded once the
-- orphan grace period is over. The row is recorded under the charge's
-- natural id (Stripe's charge id, the primary key), in the transaction that
-- inserts the job making the refund, so each orphan is resolved exactly
-- once however many passes find it.
CREATE TABLE orphan_refunds (
    stripe_charge_id  TEXT        PRIMARY KEY CHECK (char_length(stripe_charge_id) BETWEEN 1 AND 255),
    -- the charge's processor key (metadata ar_key): a client that comes back
    -- with the request of the lost booking finds its charge refunded here
    charge_key        TEXT        NOT NULL CHECK (char_length(charge_key) BETWEEN 1 AND 255),
    -- the charge's rider reference (metadata ar_rider)
    rider_ref         TEXT        NOT NULL CHECK (char_length(rider_ref) <= 255),
    amount_cents      BIGINT      NOT NULL CHECK (amount_cents > 0),
    currency          TEXT        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    charge_created_at TIMESTAMPTZ NOT NULL,
    -- the rider, when known: the user and the address; no receipt without it
    user_id           BIGINT      REFERENCES users ON DELETE SET NULL,
    email             TEXT        CHECK (char_length(email) BETWEEN 3 AND 320),
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- pending: the refund job has not recorded the processor's answer yet
    status            TEXT        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'refunded', 'failed')),
    stripe_refund_id  TEXT        UNIQUE CHECK (char_length(stripe_refund_id) BETWEEN 1 AND 255),
    refunded_at       TIMESTAMPTZ,
    receipt_sent_at   TIMESTAMPTZ,
    CONSTRAINT orphan_refunds_refunded_has_id CHECK ((status = 'refunded') = (stripe_refund_id IS NOT NULL))
);

CREATE INDEX orphan_refunds_charge_key ON orphan_refunds (charge_key);

-- Backs the booking's check for refunded orphans of its rider (one EXISTS
-- in the statement that books the ride).
CREATE INDEX orphan_refunds_user ON orphan_refunds (user_id) WHERE status = 'refunded';
