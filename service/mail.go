package service

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Mailer is the port to outgoing email. The SMTP adapter (package mail) is
// the production implementation.
//
// A message may be sent more than once (a job retried after the server
// accepted it but before the send was recorded); its MessageID is the same
// every time, so that the copies are recognisable downstream.
type Mailer interface {
	// Send delivers m to the mail server. An error means the message may or
	// may not have been accepted.
	Send(ctx context.Context, m Message) error
}

// Message is an outgoing plain-text email.
type Message struct {
	// MessageID is the Message-ID header without angle brackets, e.g.
	// "receipt.ride-42@atomicrides.localhost". It identifies the message
	// across retries.
	MessageID string
	From      string
	To        string
	Subject   string
	Date      time.Time
	// Text is the plain-text body.
	Text string
}

// Validate rejects header values that could smuggle headers into the
// message.
func (m Message) Validate() error {
	for name, v := range map[string]string{"Message-ID": m.MessageID, "From": m.From, "To": m.To, "Subject": m.Subject} {
		if v == "" {
			return fmt.Errorf("mail: %s is empty", name)
		}
		if strings.ContainsAny(v, "\r\n") {
			return fmt.Errorf("mail: %s contains a line break", name)
		}
	}
	return nil
}

// DefaultMailFrom is the sender of receipts unless another is configured
// (receipts.Config.From, MAIL_FROM).
const DefaultMailFrom = "Atomic Rides <receipts@atomicrides.localhost>"

// FormatAmount is an amount as receipts and messages show it: whole units,
// two decimals, the currency's code ("12.50 USD").
func FormatAmount(cents int64, currency string) string {
	return fmt.Sprintf("%d.%02d %s", cents/100, cents%100, strings.ToUpper(currency))
}
