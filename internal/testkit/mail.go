package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/service/mail"
	"github.com/atomicrides/atomicrides/service/mail/mailsink"
)

// NewMail serves a fresh mail sink until t ends and returns it with a mailer
// that sends to it. The sink keeps messages in memory only.
func NewMail(t testing.TB) (*mailsink.Sink, *mail.Mailer) {
	t.Helper()
	sink := mailsink.New(mailsink.Options{})
	url, stop, err := sink.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop(context.Background()) })
	mailer, err := mail.New(mail.Config{URL: url, Timeout: 5 * time.Second})
	require.NoError(t, err)
	return sink, mailer
}
