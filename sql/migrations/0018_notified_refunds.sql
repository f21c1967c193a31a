-- Refunds a processor told us about in its notifications, for the
-- processors whose API lists no refunds (Adyen's Checkout API): each
-- accepted REFUND of this deployment's charges is recorded here under its
-- natural id when the notification is applied, whatever the notification
-- did. A refund whose ride a restore lost, applied while no ride recorded
-- its charge, is recorded on the ride once the ride is booked again (its
-- client's retry gets the same payment back): the orphan pass reads this
-- table as the processor's list of refunds.
CREATE TABLE notified_refunds (
    processor    TEXT        NOT NULL CHECK (processor IN ('stripe', 'adyen')),
    refund_id    TEXT        NOT NULL CHECK (char_length(refund_id) BETWEEN 1 AND 255),
    charge_id    TEXT        NOT NULL CHECK (char_length(charge_id) BETWEEN 1 AND 255),
    amount_cents BIGINT      NOT NULL CHECK (amount_cents > 0),
    -- when the processor made the refund (the event's date, its clock)
    refunded_at  TIMESTAMPTZ NOT NULL,
    recorded_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (processor, refund_id)
);

CREATE INDEX notified_refunds_refunded_at ON notified_refunds (processor, refunded_at);
