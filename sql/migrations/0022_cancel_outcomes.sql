-- A processor that takes a cancel on and tells its outcome later (Adyen:
-- "received", then a CANCELLATION or TECHNICAL_CANCEL notification) leaves
-- a ride waiting for that outcome: a trip's hold in 'cancelling', a payment
-- its rider never authenticated in 'requires_action'.
--
-- cancel_requested_at is when the processor took the ride's cancel on; a
-- pass that finds it set does not ask again until the notification is
-- overdue. cancel_failure is the processor's reason when the cancel
-- failed: the ride stays where it was, for the operator
-- (AtomicRidesCancelFailed), until the payment's own outcome moves it.
ALTER TABLE rides
    ADD COLUMN cancel_requested_at TIMESTAMPTZ,
    ADD COLUMN cancel_failure TEXT;

-- The rides whose cancel failed and that still wait (the operators' gauge).
CREATE INDEX rides_cancel_failed ON rides (id)
    WHERE cancel_failure IS NOT NULL AND charge_status IN ('requires_action', 'cancelling');
