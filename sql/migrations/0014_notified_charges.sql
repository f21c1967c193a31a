-- Charges a processor told us about in its notifications, for the
-- processors whose API lists no payments (Adyen's Checkout API): each
-- successful AUTHORISATION of this deployment is recorded here under its
-- natural id (the processor and its charge id, the pspReference) when the
-- notification is applied, in the same transaction. Reconciliation reads
-- this table as that processor's list of charges, so a charge that no ride
-- records (an orphan) or that a ride recorded at another processor has
-- already (a double charge) is found, and resolved by the orphan policy.
CREATE TABLE notified_charges (
    processor    TEXT        NOT NULL CHECK (processor IN ('stripe', 'adyen')),
    charge_id    TEXT        NOT NULL CHECK (char_length(charge_id) BETWEEN 1 AND 255),
    -- the charge's processor key (Adyen: the merchant reference)
    charge_key   TEXT        NOT NULL CHECK (char_length(charge_key) BETWEEN 1 AND 255),
    -- the charge's rider reference (metadata ar_rider), '' when not told
    rider_ref    TEXT        NOT NULL CHECK (char_length(rider_ref) <= 255),
    amount_cents BIGINT      NOT NULL CHECK (amount_cents > 0),
    currency     TEXT        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    -- when the processor made the charge (the event's date, its clock)
    charged_at   TIMESTAMPTZ NOT NULL,
    recorded_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (processor, charge_id)
);

-- Backs reconciliation's listing of a processor's charges since a time.
CREATE INDEX notified_charges_charged_at ON notified_charges (processor, charged_at);

-- The orphan policy covers every processor, and double charges too: the
-- row says at which processor the charge to refund was made, and why it
-- is refunded. Charge ids of different processors never coincide (Stripe's
-- start with ch_ or py_, Adyen's pspReference is 16 alphanumerics), so the
-- charge id stays the primary key.
ALTER TABLE orphan_refunds
    ADD COLUMN processor TEXT NOT NULL DEFAULT 'stripe' CHECK (processor IN ('stripe', 'adyen')),
    -- orphan: no ride records the charge (refunded after the grace);
    -- double_charge: its request's ride records a charge at another
    -- processor (refunded at once)
    ADD COLUMN reason    TEXT NOT NULL DEFAULT 'orphan' CHECK (reason IN ('orphan', 'double_charge')),
    -- the ride charged at the other processor, for a double charge
    ADD COLUMN ride_id   BIGINT REFERENCES rides ON DELETE SET NULL;
