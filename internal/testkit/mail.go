package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/mailsink"
	"github.com/atomicrides/atomicrides/service/mail"
)

// NewMailSink serves a fresh SMTP mail sink on loopback until t ends and
// returns it with its smtp:// URL, for a mailer or a process to send to. The
// sink keeps messages in memory only.
func NewMailSink(t testing.TB) (*mailsink.Sink, string) {
	t.Helper()
	sink := mailsink.New(mailsink.Options{})
	url, stop, err := sink.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop(context.Background()) })
	return sink, url
}

// NewMail serves a fresh mail sink until t ends and returns it with a mailer
// that sends to it. The sink keeps messages in memory only.
func NewMail(t testing.TB) (*mailsink.Sink, *mail.Mailer) {
	t.Helper()
	sink, url := NewMailSink(t)
	mailer, err := mail.New(mail.Config{URL: url, Timeout: 5 * time.Second})
	require.NoError(t, err)
	return sink, mailer
}
