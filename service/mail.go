package service

import (
	"context"
	"errors"
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

// DefaultMailFrom is the sender of receipts when Config.MailFrom is empty.
const DefaultMailFrom = "Atomic Rides <receipts@atomicrides.localhost>"

// errNoMailer is returned by receipt sends on a service built without a
// Mailer: the job fails and is retried, so receipts are delayed, not lost.
var errNoMailer = errors.New("service: no Mailer configured")

// mailDomain is the domain of a From address, for Message-IDs.
func mailDomain(from string) string {
	addr := from
	if i := strings.LastIndexByte(addr, '<'); i >= 0 {
		addr = strings.TrimSuffix(addr[i+1:], ">")
	}
	if i := strings.LastIndexByte(addr, '@'); i >= 0 && i+1 < len(addr) {
		return addr[i+1:]
	}
	return "atomicrides.localhost"
}
