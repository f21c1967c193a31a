-- The acquirer's settlement files (docs/settlements.md). What the bank says
-- is recorded under its natural ids and applied exactly once: a file by its
-- name and SHA-256, a line by its processor reference and type.

-- One version of one settlement file, with its content, recorded in the
-- transaction that queues the job applying it. The same name with other
-- content is a new version, flagged for an operator.
CREATE TABLE settlement_files (
    id                BIGSERIAL   PRIMARY KEY,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    name              TEXT        NOT NULL CHECK (char_length(name) BETWEEN 1 AND 255),
    sha256            BYTEA       NOT NULL CHECK (octet_length(sha256) = 32),
    version           INT         NOT NULL CHECK (version >= 1),
    content           BYTEA       NOT NULL,

    -- pending until every line is applied or quarantined; rejected when the
    -- file as a whole cannot be read (its reason in problem)
    status            TEXT        NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'applied', 'rejected')),
    problem           TEXT        CHECK (char_length(problem) BETWEEN 1 AND 1000),
    -- the last line number whose outcome is committed; the next batch starts
    -- after it
    cursor_line       INT         NOT NULL DEFAULT 0 CHECK (cursor_line >= 0),
    lines_applied     INT         NOT NULL DEFAULT 0 CHECK (lines_applied >= 0),
    lines_duplicate   INT         NOT NULL DEFAULT 0 CHECK (lines_duplicate >= 0),
    lines_quarantined INT         NOT NULL DEFAULT 0 CHECK (lines_quarantined >= 0),
    finished_at       TIMESTAMPTZ,

    -- for an operator: a re-upload under a known name, or a rejected file
    flagged           BOOLEAN     NOT NULL DEFAULT false,
    flag_reason       TEXT        CHECK (char_length(flag_reason) BETWEEN 1 AND 1000),

    CONSTRAINT settlement_files_name_sha256 UNIQUE (name, sha256),
    CONSTRAINT settlement_files_name_version UNIQUE (name, version),
    CONSTRAINT settlement_files_flag CHECK (flagged = (flag_reason IS NOT NULL)),
    CONSTRAINT settlement_files_finished CHECK ((status = 'pending') = (finished_at IS NULL)),
    CONSTRAINT settlement_files_rejected CHECK ((status = 'rejected') = (problem IS NOT NULL))
);

CREATE INDEX settlement_files_pending ON settlement_files (id) WHERE status = 'pending';

-- One settled balance transaction, applied once whichever file or version
-- carried it first. A charge or refund line names the ride it settles (or
-- says why none matches).
CREATE TABLE settlement_lines (
    id                     BIGSERIAL   PRIMARY KEY,
    created_at             TIMESTAMPTZ NOT NULL DEFAULT now(),
    file_id                BIGINT      NOT NULL REFERENCES settlement_files ON DELETE RESTRICT,
    line_number            INT         NOT NULL CHECK (line_number >= 2),

    processor_reference    TEXT        NOT NULL CHECK (char_length(processor_reference) BETWEEN 1 AND 255),
    type                   TEXT        NOT NULL
        CHECK (type IN ('charge', 'refund', 'fee', 'dispute', 'payout')),
    balance_transaction_id TEXT        NOT NULL CHECK (char_length(balance_transaction_id) BETWEEN 1 AND 255),
    transaction_created_at TIMESTAMPTZ NOT NULL,
    gross_cents            BIGINT      NOT NULL,
    fee_cents              BIGINT      NOT NULL,
    net_cents              BIGINT      NOT NULL,
    currency               TEXT        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    batch                  TEXT        NOT NULL CHECK (char_length(batch) BETWEEN 1 AND 255),
    payout_id              TEXT        NOT NULL CHECK (char_length(payout_id) BETWEEN 1 AND 255),
    payout_effective_at    TIMESTAMPTZ NOT NULL,

    -- matched: the ride (and refund) it settles agree with it; unknown: no
    -- charge or refund of ours has its reference; mismatch: ours differs in
    -- amount or currency (reason in mismatch); none: a fee, dispute or
    -- payout line, which settles nothing of ours one to one
    match                  TEXT        NOT NULL
        CHECK (match IN ('matched', 'unknown', 'mismatch', 'none')),
    mismatch               TEXT        CHECK (char_length(mismatch) BETWEEN 1 AND 1000),
    ride_id                BIGINT      REFERENCES rides ON DELETE RESTRICT,
    refund_id              BIGINT      REFERENCES refunds ON DELETE RESTRICT,

    CONSTRAINT settlement_lines_reference_type UNIQUE (processor_reference, type),
    CONSTRAINT settlement_lines_amounts CHECK (gross_cents - fee_cents = net_cents),
    CONSTRAINT settlement_lines_mismatch CHECK ((match = 'mismatch') = (mismatch IS NOT NULL))
);

CREATE INDEX settlement_lines_file_id ON settlement_lines (file_id, line_number);
CREATE INDEX settlement_lines_ride_id ON settlement_lines (ride_id) WHERE ride_id IS NOT NULL;
CREATE INDEX settlement_lines_discrepancies ON settlement_lines (id) WHERE match IN ('unknown', 'mismatch');

-- A line that was not applied: malformed, or a corrected copy of a line
-- already applied from another file. Kept with its reason for an operator.
CREATE TABLE settlement_quarantined_lines (
    id          BIGSERIAL   PRIMARY KEY,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    file_id     BIGINT      NOT NULL REFERENCES settlement_files ON DELETE RESTRICT,
    line_number INT         NOT NULL CHECK (line_number >= 1),
    reason      TEXT        NOT NULL CHECK (char_length(reason) BETWEEN 1 AND 1000),
    raw         TEXT        NOT NULL,

    CONSTRAINT settlement_quarantined_lines_file_line UNIQUE (file_id, line_number)
);
