-- An orphan charge the processor had refunded already when the orphan pass
-- found it (its ride refunded, then lost with a restore): the orphan is
-- resolved as refunded with that refund, and nothing is sent, neither a
-- refund nor the rider's receipt.
ALTER TABLE orphan_refunds ADD COLUMN refunded_before BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE orphan_refunds ADD CONSTRAINT orphan_refunds_refunded_before_is_refunded
    CHECK (NOT refunded_before OR status = 'refunded');
