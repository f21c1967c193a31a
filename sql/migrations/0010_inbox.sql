-- The inbox: every message a processor sends us (a webhook event), recorded
-- under its natural id before it is acknowledged, once. The primary key is
-- (source, event_id): a processor redelivers an event under the same id, so
-- a duplicate delivery finds its row and writes nothing; another processor
-- (source 'adyen', its PSP reference) brings ids of its own.
--
-- The row and the job that applies it (River, inserted in the same
-- transaction) commit together; applied_at is set in the transaction that
-- applies the event's effect, so an event is applied exactly once however
-- often its job runs.
CREATE TABLE inbox_events (
    source      TEXT        NOT NULL CHECK (source ~ '^[a-z][a-z0-9_]{0,19}$'),
    event_id    TEXT        NOT NULL CHECK (char_length(event_id) BETWEEN 1 AND 255),
    event_type  TEXT        NOT NULL CHECK (char_length(event_type) BETWEEN 1 AND 100),
    -- when the processor made the event (its own clock)
    occurred_at TIMESTAMPTZ NOT NULL,
    received_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- the event as received (its signature was checked on the raw bytes,
    -- before this row was written)
    payload     JSONB       NOT NULL,
    -- set once, with the effect; outcome says what applying did
    applied_at  TIMESTAMPTZ,
    outcome     TEXT        CHECK (char_length(outcome) BETWEEN 1 AND 50),

    PRIMARY KEY (source, event_id),
    CONSTRAINT inbox_events_applied_has_outcome CHECK ((applied_at IS NULL) = (outcome IS NULL))
);

-- Backs the listing of events not applied yet (operators, metrics).
CREATE INDEX inbox_events_unapplied ON inbox_events (received_at) WHERE applied_at IS NULL;

-- The dispute (chargeback) of a ride's charge, as the processor reports it:
-- none, then disputed, then won or lost for good. It only moves forward.
ALTER TABLE rides ADD COLUMN dispute_status TEXT NOT NULL DEFAULT 'none'
    CHECK (dispute_status IN ('none', 'disputed', 'won', 'lost'));
ALTER TABLE rides ADD COLUMN stripe_dispute_id TEXT
    CHECK (char_length(stripe_dispute_id) BETWEEN 1 AND 255);
ALTER TABLE rides ADD CONSTRAINT rides_disputed_has_dispute CHECK (
    (dispute_status = 'none') = (stripe_dispute_id IS NULL)
);
