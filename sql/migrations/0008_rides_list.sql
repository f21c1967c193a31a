-- A rider's rides, listed newest first and paged by keyset, and the reason a
-- declined ride was declined.

-- Serves GET /rides: one rider's rides in (created_at, id) order. A page is
-- a range scan from a cursor's position, so it costs the same at the first
-- page and at the ten-thousandth, however many rides the table holds. It
-- also serves everything rides_user_id served (its leading column), which
-- therefore goes.
CREATE INDEX rides_user_id_created_at_id ON rides (user_id, created_at, id);
DROP INDEX rides_user_id;

-- What the rider was told when the charge was declined: the processor's
-- code (e.g. card_declined, or payment_rejected when the processor refused
-- the charge for a reason other than the card) and the message the 402
-- answer carried. Rides declined before this migration have neither.
ALTER TABLE rides
    ADD COLUMN decline_code    TEXT CHECK (char_length(decline_code) BETWEEN 1 AND 255),
    ADD COLUMN decline_message TEXT CHECK (char_length(decline_message) BETWEEN 1 AND 1000),
    ADD CONSTRAINT rides_decline_only_declined CHECK (
        charge_status = 'declined' OR (decline_code IS NULL AND decline_message IS NULL)
    );
