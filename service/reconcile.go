package service

import (
	"context"
	"errors"
	"time"

	"github.com/atomicrides/atomicrides/dbgen"
)

// ReconcileOrphan is an object at the processor, made by this deployment,
// that no ride or refund of ours records: typically a charge whose
// recording commit was lost (a restored backup, a promoted standby) and
// whose client never retried.
type ReconcileOrphan struct {
	ID       string `json:"id"`
	ChargeID string `json:"charge_id,omitempty"`
	// PaymentID is a hold's payment (its PaymentIntent), which releases it.
	PaymentID   string    `json:"payment_id,omitempty"`
	AmountCents int64     `json:"amount_cents"`
	Status      string    `json:"status"`
	Created     time.Time `json:"created"`
	// Rider is the rider reference of the object's metadata (ar_rider).
	Rider string `json:"rider"`
	// ProcessorKey is the processor idempotency key it was made under.
	ProcessorKey string `json:"processor_key"`
	// processor is the processor that listed it (the orphan policy
	// resolves Stripe's).
	processor string
}

// ReconcileMissing is a ride recorded as charged whose charge the
// processor does not have.
type ReconcileMissing struct {
	RideID    int64  `json:"ride_id"`
	ChargeID  string `json:"charge_id"`
	Processor string `json:"processor"`
}

// ReconcileDouble is a ride charged at two processors: the ride records its
// charge at RecordedProcessor, and OtherProcessor holds another charge made
// under the same charge key (the commit that routed the ride was lost, and
// the request was routed anew while its first processor was down). The
// orphan policy refunds the other charge at once (OrphanRefundsSchedule).
type ReconcileDouble struct {
	RideID            int64  `json:"ride_id"`
	RecordedProcessor string `json:"recorded_processor"`
	RecordedChargeID  string `json:"recorded_charge_id"`
	OtherProcessor    string `json:"other_processor"`
	OtherChargeID     string `json:"other_charge_id"`
	ProcessorKey      string `json:"processor_key"`
}

// ReconcileReport is what a reconciliation found.
type ReconcileReport struct {
	Namespace string    `json:"namespace"`
	Since     time.Time `json:"since"`
	// Charges and Refunds count what the processor listed for this
	// deployment since Since.
	Charges        int                `json:"charges"`
	Refunds        int                `json:"refunds"`
	OrphanCharges  []ReconcileOrphan  `json:"orphan_charges"`
	OrphanRefunds  []ReconcileOrphan  `json:"orphan_refunds"`
	MissingCharges []ReconcileMissing `json:"missing_charges"`
	// DoubleCharges are rides charged at two processors.
	DoubleCharges []ReconcileDouble `json:"double_charges"`
	// OrphanHolds are holds (authorized, uncaptured payments of trips)
	// that no ride records and no request in flight will: their booking
	// was lost with a restore. They took no money; the orphan pass
	// releases them.
	OrphanHolds []ReconcileOrphan `json:"orphan_holds"`
	// Processors are the processors listed; Notified those whose API
	// offers no listing (Adyen's Checkout API) and whose charges were read
	// from their notifications (notified_charges); Unlisted those with
	// neither: their side is seen only through the other processors'
	// lists and the processor's own reports.
	Processors []string `json:"processors"`
	Notified   []string `json:"notified"`
	Unlisted   []string `json:"unlisted"`

	// at is when the reconciliation began, by the database's clock: every
	// charge made before then is listed. unrecorded are the creation times
	// of the listed charges no ride records, in flight or not. The orphan
	// pass looks for them in the database's gaps (database_gaps.go).
	at         time.Time
	unrecorded []time.Time
}

// Clean reports whether the reconciliation found nothing to look at.
func (r *ReconcileReport) Clean() bool {
	return len(r.OrphanCharges) == 0 && len(r.OrphanRefunds) == 0 && len(r.MissingCharges) == 0 &&
		len(r.DoubleCharges) == 0 && len(r.OrphanHolds) == 0
}

// Orphans counts the findings by the kind labels of
// atomicrides_reconcile_orphans (ReconcileOrphanKinds).
func (r *ReconcileReport) Orphans() map[string]int {
	return map[string]int{
		"charge":         len(r.OrphanCharges),
		"refund":         len(r.OrphanRefunds),
		"missing_charge": len(r.MissingCharges),
		"double_charge":  len(r.DoubleCharges),
		"hold":           len(r.OrphanHolds),
	}
}

// Reconcile compares the processor's charges and refunds of the last
// window (by the database's clock) with our records: charges and refunds
// that belong to this deployment (metadata ar_ns) and that no ride (nor the
// orphan policy's refund, orphans.go) records,
// and rides recorded as charged within the window that the processor does
// not have. Objects of requests still unfinished (whose recording may be on
// its way) are not orphans. It feeds the reconciliation gauges
// (ReconcileObserved) and logs a line; the caller decides what a finding means (the CLI exits non-zero).
func (s *Service) Reconcile(ctx context.Context, window time.Duration) (*ReconcileReport, error) {
	now, err := s.queries.ClockNow(ctx, s.pool)
	if err != nil {
		return nil, Internal(err)
	}
	rep := &ReconcileReport{
		at:             now,
		Namespace:      s.namespace,
		Since:          now.Add(-window).UTC(),
		OrphanCharges:  []ReconcileOrphan{},
		OrphanRefunds:  []ReconcileOrphan{},
		MissingCharges: []ReconcileMissing{},
		DoubleCharges:  []ReconcileDouble{},
		Processors:     []string{},
		Notified:       []string{},
		Unlisted:       []string{},
	}
	listedIDs := map[string]bool{}
	inFlight := map[string]bool{}

	// Read our side first: whatever is recorded before the processor is
	// listed is seen, and what is recorded meanwhile is at worst in flight.
	unfinished, err := s.queries.IdempotencyKeyListUnfinishedRides(ctx, s.pool, s.rides.Name)
	if err != nil {
		return nil, Internal(err)
	}
	for _, k := range unfinished {
		inFlight[ChargeKey(s.namespace, k.Email, k.IdempotencyKey)] = true
	}
	pendingRefundCharges := map[string]bool{}
	pending, err := s.queries.RefundListPendingCharges(ctx, s.pool)
	if err != nil {
		return nil, Internal(err)
	}
	for _, id := range pending {
		pendingRefundCharges[id] = true
	}
	charged, err := s.queries.RideListChargedSince(ctx, s.pool, window.Seconds())
	if err != nil {
		return nil, Internal(err)
	}

	for _, name := range s.order {
		proc := s.processors[name]
		listed, err := s.reconcileAt(ctx, proc, rep, listedIDs, inFlight, pendingRefundCharges, window)
		if err != nil {
			return nil, err
		}
		if !listed {
			// Without a listing, the charges its notifications told.
			if s.InboxEnabled(name) {
				if err := s.reconcileNotified(ctx, proc, rep, inFlight, pendingRefundCharges, window); err != nil {
					return nil, err
				}
				rep.Notified = append(rep.Notified, name)
				continue
			}
			rep.Unlisted = append(rep.Unlisted, name)
			continue
		}
		rep.Processors = append(rep.Processors, name)
		for _, ride := range charged {
			if ride.Processor != name || listedIDs[ride.StripeChargeID] {
				continue
			}
			// Not in the list (or created before its window): ask for it.
			ch, err := proc.pay.ChargeGet(ctx, ride.StripeChargeID)
			if err != nil {
				return nil, err
			}
			if ch == nil {
				rep.MissingCharges = append(rep.MissingCharges, ReconcileMissing{RideID: ride.ID, ChargeID: ride.StripeChargeID, Processor: name})
			}
		}
	}

	s.ReconcileObserved(rep.Orphans(), time.Now())
	level := "clean"
	log := s.logger.InfoContext
	if !rep.Clean() {
		level, log = "findings: list them with 'keys reconcile'", s.logger.WarnContext
	}
	log(ctx, "reconciliation with the payment processor: "+level, "since", rep.Since,
		"charges", rep.Charges, "refunds", rep.Refunds, "orphan_charges", len(rep.OrphanCharges),
		"orphan_refunds", len(rep.OrphanRefunds), "missing_charges", len(rep.MissingCharges), "double_charges", len(rep.DoubleCharges),
		"notified", rep.Notified, "unlisted", rep.Unlisted)
	return rep, nil
}

// reconcileAt lists proc's charges and refunds since rep.Since into rep:
// orphans, and charges of rides recorded at another processor (double
// charges). It reports false, having done nothing, for a processor whose
// API offers no listing.
func (s *Service) reconcileAt(ctx context.Context, proc *processor, rep *ReconcileReport, listedIDs, inFlight, pendingRefundCharges map[string]bool, window time.Duration) (bool, error) {
	charges, err := proc.pay.ChargeListSince(ctx, rep.Since)
	if isUnsupported(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var ours, holds []*Charge
	for _, ch := range charges {
		listedIDs[ch.ID] = true
		switch {
		case ch.Tag.Namespace != s.namespace:
		case ch.Status == ChargeSucceeded:
			ours = append(ours, ch)
		case ch.Status == ChargeAuthorized:
			holds = append(holds, ch)
		}
	}
	if err := s.classifyCharges(ctx, proc.name, ours, rep, inFlight, window); err != nil {
		return false, err
	}
	if err := s.classifyHolds(ctx, proc.name, holds, rep, inFlight); err != nil {
		return false, err
	}

	refunds, err := proc.pay.RefundListSince(ctx, rep.Since)
	if err != nil {
		return false, err
	}
	var ourRefunds []*Refund
	for _, r := range refunds {
		if r.Tag.Namespace == s.namespace && r.Accepted() {
			ourRefunds = append(ourRefunds, r)
		}
	}
	rep.Refunds += len(ourRefunds)
	ids := make([]string, len(ourRefunds))
	for i, r := range ourRefunds {
		ids[i] = r.ID
	}
	recorded, err := s.recordedSet(ctx, ids, s.queries.RefundListRecorded)
	if err != nil {
		return false, err
	}
	if err := s.recordedAlso(ctx, recorded, ids, s.queries.OrphanRefundListRecordedRefunds); err != nil {
		return false, err
	}
	for _, r := range ourRefunds {
		if !recorded[r.ID] && !pendingRefundCharges[r.ChargeID] {
			rep.OrphanRefunds = append(rep.OrphanRefunds, ReconcileOrphan{
				ID: r.ID, ChargeID: r.ChargeID, AmountCents: r.AmountCents, Status: r.Status,
				Created: r.Created.UTC(), Rider: r.Tag.Rider, ProcessorKey: r.Tag.Key, processor: proc.name,
			})
		}
	}

	return true, nil
}

// classifyCharges adds to rep the charges of this deployment at the
// processor name that no ride records: a double charge when a ride of the
// window records a charge under the same charge key at another processor,
// else an orphan unless its request is still in flight. A charge the
// orphan policy refunded is resolved, neither.
func (s *Service) classifyCharges(ctx context.Context, name string, ours []*Charge, rep *ReconcileReport, inFlight map[string]bool, window time.Duration) error {
	rep.Charges += len(ours)
	ids := make([]string, len(ours))
	for i, ch := range ours {
		ids[i] = ch.ID
	}
	recorded, err := s.recordedSet(ctx, ids, s.queries.RideListRecordedCharges)
	if err != nil {
		return err
	}
	// An orphan the orphan policy refunded is resolved.
	if err := s.recordedAlso(ctx, recorded, ids, s.queries.OrphanRefundListResolved); err != nil {
		return err
	}
	elsewhere, err := s.chargedElsewhere(ctx, name, window)
	if err != nil {
		return err
	}
	for _, ch := range ours {
		if ride, ok := elsewhere[ch.Tag.Key]; ok && !recorded[ch.ID] {
			rep.DoubleCharges = append(rep.DoubleCharges, ReconcileDouble{
				RideID: ride.ID, RecordedProcessor: ride.Processor, RecordedChargeID: ride.ChargeID,
				OtherProcessor: name, OtherChargeID: ch.ID, ProcessorKey: ch.Tag.Key,
			})
			continue
		}
		if !recorded[ch.ID] {
			rep.unrecorded = append(rep.unrecorded, ch.Created)
		}
		if !recorded[ch.ID] && !inFlight[ch.Tag.Key] {
			rep.OrphanCharges = append(rep.OrphanCharges, ReconcileOrphan{
				ID: ch.ID, AmountCents: ch.AmountCents, Status: ch.Status, Created: ch.Created.UTC(),
				Rider: ch.Tag.Rider, ProcessorKey: ch.Tag.Key, processor: name,
			})
		}
	}
	return nil
}

// classifyHolds adds to rep the holds of this deployment at the processor
// name that no ride records and no request in flight will.
func (s *Service) classifyHolds(ctx context.Context, name string, holds []*Charge, rep *ReconcileReport, inFlight map[string]bool) error {
	if len(holds) == 0 {
		return nil
	}
	ids := make([]string, len(holds))
	for i, ch := range holds {
		ids[i] = ch.ID
	}
	recorded, err := s.recordedSet(ctx, ids, s.queries.RideListRecordedCharges)
	if err != nil {
		return err
	}
	for _, ch := range holds {
		if recorded[ch.ID] || inFlight[ch.Tag.Key] {
			continue
		}
		rep.unrecorded = append(rep.unrecorded, ch.Created)
		rep.OrphanHolds = append(rep.OrphanHolds, ReconcileOrphan{
			ID: ch.ID, PaymentID: ch.PaymentID, AmountCents: ch.AmountCents, Status: ch.Status, Created: ch.Created.UTC(),
			Rider: ch.Tag.Rider, ProcessorKey: ch.Tag.Key, processor: name,
		})
	}
	return nil
}

// reconcileNotified classifies the charges of proc, a processor whose API
// lists none, that its notifications recorded since rep.Since
// (notified_charges: successful AUTHORISATIONs of this deployment).
func (s *Service) reconcileNotified(ctx context.Context, proc *processor, rep *ReconcileReport, inFlight, pendingRefundCharges map[string]bool, window time.Duration) error {
	rows, err := s.queries.NotifiedChargeListSince(ctx, s.pool, proc.name, rep.Since)
	if err != nil {
		return Internal(err)
	}
	var ours, holds []*Charge
	for _, r := range rows {
		switch ch := notifiedCharge(s.namespace, r); {
		case !r.Hold:
			ours = append(ours, ch)
		case r.ReleasedAt == nil:
			holds = append(holds, ch)
		}
	}
	if err := s.classifyCharges(ctx, proc.name, ours, rep, inFlight, window); err != nil {
		return err
	}
	if err := s.classifyHolds(ctx, proc.name, holds, rep, inFlight); err != nil {
		return err
	}
	return s.reconcileNotifiedRefunds(ctx, proc, rep, pendingRefundCharges)
}

// reconcileNotifiedRefunds lists as orphans the refunds of proc that its
// notifications recorded since rep.Since (notified_refunds) whose charge a
// ride records and which no refund records: a ride booked again after a
// restore lost it together with its refund. A ride whose refund is pending
// records it on its way.
func (s *Service) reconcileNotifiedRefunds(ctx context.Context, proc *processor, rep *ReconcileReport, pendingRefundCharges map[string]bool) error {
	rows, err := s.queries.NotifiedRefundListOfRidesSince(ctx, s.pool, proc.name, rep.Since)
	if err != nil {
		return Internal(err)
	}
	rep.Refunds += len(rows)
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.RefundID
	}
	recorded, err := s.recordedSet(ctx, ids, s.queries.RefundListRecorded)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if !recorded[r.RefundID] && !pendingRefundCharges[r.ChargeID] {
			rep.OrphanRefunds = append(rep.OrphanRefunds, ReconcileOrphan{
				ID: r.RefundID, ChargeID: r.ChargeID, AmountCents: r.AmountCents, Status: RefundSucceeded,
				Created: r.RefundedAt.UTC(), processor: proc.name,
			})
		}
	}
	return nil
}

// notifiedCharge is the charge a notification recorded.
func notifiedCharge(namespace string, r *dbgen.NotifiedCharge) *Charge {
	ch := &Charge{
		ID: r.ChargeID, PaymentID: r.ChargeID, AmountCents: r.AmountCents, Currency: r.Currency, Status: ChargeSucceeded,
		Created: r.ChargedAt, Tag: Tag{Namespace: namespace, Rider: r.RiderRef, Key: r.ChargeKey},
	}
	if r.Hold {
		ch.Status = ChargeAuthorized
	}
	return ch
}

// chargedElsewhere returns the rides of the window charged at a processor
// other than name, by their charge key.
func (s *Service) chargedElsewhere(ctx context.Context, name string, window time.Duration) (map[string]*dbgen.RideListChargedElsewhereRow, error) {
	rows, err := s.queries.RideListChargedElsewhere(ctx, s.pool, name, window.Seconds())
	if err != nil {
		return nil, Internal(err)
	}
	out := make(map[string]*dbgen.RideListChargedElsewhereRow, len(rows))
	for _, r := range rows {
		out[ChargeKey(s.namespace, r.Email, r.IdempotencyKey)] = r
	}
	return out, nil
}

// isUnsupported reports whether the processor answered that its API offers
// no such operation.
func isUnsupported(err error) bool {
	var pe *PaymentError
	return errors.As(err, &pe) && pe.Code == PaymentCodeUnsupported
}

// recordedSet is the subset of ids that query finds recorded.
func (s *Service) recordedSet(ctx context.Context, ids []string, query func(context.Context, dbgen.DBTX, []string) ([]string, error)) (map[string]bool, error) {
	set := map[string]bool{}
	if len(ids) == 0 {
		return set, nil
	}
	found, err := query(ctx, s.pool, ids)
	if err != nil {
		return nil, Internal(err)
	}
	for _, id := range found {
		set[id] = true
	}
	return set, nil
}

// recordedAlso adds to set the ids that query finds recorded.
func (s *Service) recordedAlso(ctx context.Context, set map[string]bool, ids []string, query func(context.Context, dbgen.DBTX, []string) ([]string, error)) error {
	more, err := s.recordedSet(ctx, ids, query)
	if err != nil {
		return err
	}
	for id := range more {
		set[id] = true
	}
	return nil
}
