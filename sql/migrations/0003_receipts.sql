-- One row per email receipt sent: written after the mail server accepted the
-- message, so that a retried job sends no second one. A crash between the
-- send and this row resends the message with the same Message-ID, which
-- downstream deduplication recognises.
CREATE TABLE receipts (
    id         BIGSERIAL   PRIMARY KEY,
    sent_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    kind       TEXT        NOT NULL CHECK (kind IN ('ride', 'refund')),
    ride_id    BIGINT      NOT NULL REFERENCES rides ON DELETE CASCADE,
    message_id TEXT        NOT NULL UNIQUE CHECK (char_length(message_id) BETWEEN 3 AND 255),
    recipient  TEXT        NOT NULL CHECK (char_length(recipient) BETWEEN 3 AND 320),
    UNIQUE (ride_id, kind)
);
