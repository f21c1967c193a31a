-- The service's schema. sqlc reads this directory as its schema source and the
-- migrator applies every file in lexical order, once, inside a transaction.

-- A person who books rides. The Stripe customer is created by a background job
-- (or, if a ride comes first, by the ride's charge phase) under the
-- entity-level Stripe idempotency key "user-<id>-customer".
CREATE TABLE users (
    id                 BIGSERIAL   PRIMARY KEY,
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    email              TEXT        NOT NULL UNIQUE
        CHECK (char_length(email) BETWEEN 3 AND 255),
    payment_source     TEXT        NOT NULL
        CHECK (char_length(payment_source) BETWEEN 1 AND 255),
    stripe_customer_id TEXT        UNIQUE
        CHECK (char_length(stripe_customer_id) BETWEEN 1 AND 255)
);

-- Bearer credentials of riders. Only a SHA-256 of the key is stored; the key
-- itself is shown once, when minted.
CREATE TABLE api_keys (
    id         BIGSERIAL   PRIMARY KEY,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    key_hash   BYTEA       NOT NULL UNIQUE CHECK (octet_length(key_hash) = 32),
    user_id    BIGINT      NOT NULL REFERENCES users ON DELETE CASCADE
);

CREATE INDEX api_keys_user_id ON api_keys (user_id);

-- One row per (user, client idempotency key): the bookkeeping of a request
-- that may be retried. A key is leased while a request works on it
-- (locked_at + lock_token); every phase writes it only under its own token.
CREATE TABLE idempotency_keys (
    id                  BIGSERIAL   PRIMARY KEY,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    idempotency_key     TEXT        NOT NULL
        CHECK (char_length(idempotency_key) BETWEEN 1 AND 255),
    last_run_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_at           TIMESTAMPTZ,
    lock_token          UUID,

    -- what the request was: the flow that serves it and its normalised input
    flow                TEXT        NOT NULL CHECK (char_length(flow) BETWEEN 1 AND 50),
    request_method      TEXT        NOT NULL CHECK (char_length(request_method) BETWEEN 1 AND 10),
    request_path        TEXT        NOT NULL CHECK (char_length(request_path) BETWEEN 1 AND 255),
    request_params      JSONB       NOT NULL,
    request_fingerprint BYTEA       NOT NULL CHECK (octet_length(request_fingerprint) = 32),
    request_ip          INET,

    -- for finished requests, the stored status code and body, byte for byte
    response_code       INT         CHECK (response_code BETWEEN 100 AND 599),
    response_body       BYTEA,

    recovery_point      TEXT        NOT NULL CHECK (char_length(recovery_point) BETWEEN 1 AND 50),
    user_id             BIGINT      NOT NULL REFERENCES users ON DELETE RESTRICT,

    CONSTRAINT idempotency_keys_user_id_idempotency_key UNIQUE (user_id, idempotency_key),
    CONSTRAINT idempotency_keys_lease CHECK ((locked_at IS NULL) = (lock_token IS NULL)),
    CONSTRAINT idempotency_keys_finished CHECK (
        (recovery_point = 'finished') = (response_code IS NOT NULL AND response_body IS NOT NULL)
    ),
    CONSTRAINT idempotency_keys_finished_unlocked CHECK (
        recovery_point <> 'finished' OR locked_at IS NULL
    )
);

-- Backs the completer's search for abandoned requests and the reaper's search
-- for old finished ones.
CREATE INDEX idempotency_keys_unfinished
    ON idempotency_keys (last_run_at)
    WHERE recovery_point <> 'finished';
CREATE INDEX idempotency_keys_finished_created_at
    ON idempotency_keys (created_at)
    WHERE recovery_point = 'finished';

-- A single ride. It holds the Stripe charge once there is one.
CREATE TABLE rides (
    id                 BIGSERIAL       PRIMARY KEY,
    created_at         TIMESTAMPTZ     NOT NULL DEFAULT now(),

    -- The key that created the ride, to recover it on a retry. Keys are
    -- reaped eventually; rides stay.
    idempotency_key_id BIGINT          REFERENCES idempotency_keys ON DELETE SET NULL,

    origin_lat         NUMERIC(13, 10) NOT NULL CHECK (origin_lat BETWEEN -90 AND 90),
    origin_lon         NUMERIC(13, 10) NOT NULL CHECK (origin_lon BETWEEN -180 AND 180),
    target_lat         NUMERIC(13, 10) NOT NULL CHECK (target_lat BETWEEN -90 AND 90),
    target_lon         NUMERIC(13, 10) NOT NULL CHECK (target_lon BETWEEN -180 AND 180),

    -- pending until the charge phase decides; declined rides carry no charge
    charge_status      TEXT            NOT NULL DEFAULT 'pending'
        CHECK (charge_status IN ('pending', 'charged', 'declined')),
    stripe_charge_id   TEXT            UNIQUE
        CHECK (char_length(stripe_charge_id) BETWEEN 1 AND 255),
    amount_cents       BIGINT          NOT NULL CHECK (amount_cents > 0),
    currency           TEXT            NOT NULL CHECK (currency ~ '^[a-z]{3}$'),

    user_id            BIGINT          NOT NULL REFERENCES users ON DELETE RESTRICT,

    CONSTRAINT rides_user_id_idempotency_key_id UNIQUE (user_id, idempotency_key_id),
    CONSTRAINT rides_charged_has_charge CHECK (
        (charge_status = 'charged') = (stripe_charge_id IS NOT NULL)
    )
);

CREATE INDEX rides_idempotency_key_id ON rides (idempotency_key_id)
    WHERE idempotency_key_id IS NOT NULL;
CREATE INDEX rides_user_id ON rides (user_id);

-- The one audit log: what happened, to which resource, on whose behalf.
CREATE TABLE audit_records (
    id            BIGSERIAL   PRIMARY KEY,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    action        TEXT        NOT NULL CHECK (char_length(action) BETWEEN 1 AND 50),
    data          JSONB       NOT NULL,
    origin_ip     INET,
    resource_id   BIGINT      NOT NULL,
    resource_type TEXT        NOT NULL CHECK (char_length(resource_type) BETWEEN 1 AND 50),
    user_id       BIGINT      NOT NULL REFERENCES users ON DELETE RESTRICT
);

CREATE INDEX audit_records_user_id ON audit_records (user_id);
CREATE INDEX audit_records_resource ON audit_records (resource_type, resource_id);
