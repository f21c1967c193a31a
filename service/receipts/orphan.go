package receipts

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/service"
)

// errOrphanNoRecipient underlies the failure of an orphan receipt whose
// rider is unknown.
var errOrphanNoRecipient = errors.New("orphan charge: no known rider to send the receipt to")

// OrphanMessageID is the Message-ID of the receipt of a refunded
// orphan charge: the same on every send.
func OrphanMessageID(chargeID, from string) string {
	return fmt.Sprintf("receipt.orphan-%s@%s", chargeID, mailDomain(from))
}

// OrphanSend emails the rider of a refunded orphan charge that the
// booking was lost and the money returned, once: false when it was sent
// already. Like RideSend, the message goes out with no transaction
// open and is recorded with what recorded writes. An orphan whose rider is
// unknown is service.CodeInvalid (no retry can mend it).
func (s *Service) OrphanSend(ctx context.Context, chargeID string, recorded RecordedFunc) (bool, error) {
	if s.mailer == nil {
		return false, service.Internal(errNoMailer)
	}
	o, err := s.queries.OrphanRefundGet(ctx, s.pool, chargeID)
	if service.IsNoRows(err) {
		return false, &service.Error{Code: service.CodeNotFound, Message: fmt.Sprintf("no orphan charge %s", chargeID)}
	} else if err != nil {
		return false, service.Internal(err)
	}
	if o.ReceiptSentAt != nil {
		return false, nil
	}
	if o.Status != service.OrphanRefundRefunded || o.StripeRefundID == nil {
		return false, &service.Error{Code: service.CodeInvalid, Message: fmt.Sprintf("orphan charge %s is not refunded", chargeID)}
	}
	if o.Email == nil {
		return false, &service.Error{Code: service.CodeInvalid, Message: errOrphanNoRecipient.Error() + ": " + chargeID}
	}
	var b strings.Builder
	subject := "Refund of a booking we lost"
	if o.Reason == service.OrphanReasonDoubleCharge {
		subject = "Refund of a second charge for one booking"
		fmt.Fprintf(&b, "We have refunded a second charge for the same booking.\n\n")
		fmt.Fprintf(&b, "On %s you were charged %s for a ride booking that was also paid\n",
			o.ChargeCreatedAt.UTC().Format("2006-01-02 15:04 MST"), service.FormatAmount(o.AmountCents, o.Currency))
		fmt.Fprintf(&b, "through another payment processor after a system failure. Your ride stays\n")
		fmt.Fprintf(&b, "booked and paid once; this second charge has been refunded in full.\n\n")
	} else {
		fmt.Fprintf(&b, "We have refunded a charge for a booking we could not keep.\n\n")
		fmt.Fprintf(&b, "On %s you were charged %s for a ride booking, but our records of\n",
			o.ChargeCreatedAt.UTC().Format("2006-01-02 15:04 MST"), service.FormatAmount(o.AmountCents, o.Currency))
		fmt.Fprintf(&b, "that booking were lost in a system failure, so no ride was booked.\n")
		fmt.Fprintf(&b, "The charge has been refunded in full.\n\n")
	}
	fmt.Fprintf(&b, "Charge:   %s\n", o.StripeChargeID)
	fmt.Fprintf(&b, "Refund:   %s\n", *o.StripeRefundID)
	if o.Reason == service.OrphanReasonDoubleCharge {
		fmt.Fprintf(&b, "It reaches your card within 5 to 10 business days.\n")
	} else {
		fmt.Fprintf(&b, "It reaches your card within 5 to 10 business days. Please book again if you\nstill need the ride.\n")
	}
	msg := service.Message{
		MessageID: OrphanMessageID(chargeID, s.from),
		From:      s.from,
		To:        *o.Email,
		Subject:   subject,
		Date:      s.now(),
		Text:      b.String(),
	}
	if err := s.mailer.Send(ctx, msg); err != nil {
		return false, fmt.Errorf("send orphan receipt of charge %s: %w", chargeID, err)
	}
	err = s.record(ctx, recorded, func(ctx context.Context, tx pgx.Tx) error {
		_, err := s.queries.OrphanRefundSetReceiptSent(ctx, tx, msg.Date, chargeID)
		return err
	})
	if err != nil {
		return true, service.Internal(err)
	}
	return true, nil
}
