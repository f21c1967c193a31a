package mail_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/fake/mailsink"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/mail"
)

func setup(t *testing.T) (*mailsink.Sink, string) {
	t.Helper()
	sink := mailsink.New(mailsink.Options{Dir: t.TempDir()})
	url, stop, err := sink.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = stop(context.Background()) })
	return sink, url
}

var msg = service.Message{
	MessageID: "receipt.ride-7@example.com",
	From:      "Atomic Rides <receipts@example.com>",
	To:        "rider@example.com",
	Subject:   "Your receipt — ride 7",
	Date:      time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC),
	Text:      "line one\n.a line starting with a dot\n.\nlast",
}

func TestSend(t *testing.T) {
	t.Parallel()
	sink, url := setup(t)
	m, err := mail.New(mail.Config{URL: url})
	require.NoError(t, err)
	require.NoError(t, m.Send(context.Background(), msg))

	got := sink.Messages()
	require.Len(t, got, 1)
	require.Equal(t, "receipts@example.com", got[0].From)
	require.Equal(t, []string{"rider@example.com"}, got[0].To)
	require.Equal(t, "receipt.ride-7@example.com", got[0].MessageID)
	want, err := mail.Format(msg)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got[0].Data), "dot-stuffed lines arrive intact")
	require.True(t, strings.HasSuffix(string(got[0].Data), "\r\n.\r\nlast\r\n"))
}

func TestSendRefusals(t *testing.T) {
	t.Parallel()
	sink, url := setup(t)

	m, err := mail.New(mail.Config{URL: url})
	require.NoError(t, err)
	sink.Refuse(1, 451)
	err = m.Send(context.Background(), msg)
	require.ErrorContains(t, err, "451")
	require.Zero(t, sink.Count())

	strict, err := mail.New(mail.Config{URL: url + "?starttls=required"})
	require.NoError(t, err)
	require.ErrorContains(t, strict.Send(context.Background(), msg), "STARTTLS")
	require.Zero(t, sink.Count())

	bad := msg
	bad.Subject = "hi\r\nBcc: someone@example.com"
	require.ErrorContains(t, m.Send(context.Background(), bad), "line break")

	down, err := mail.New(mail.Config{URL: "smtp://127.0.0.1:1", Timeout: 2 * time.Second})
	require.NoError(t, err)
	require.Error(t, down.Send(context.Background(), msg))
}

func TestNewRejectsBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"http://mail.example.com", "smtp://", "smtp://h?starttls=maybe", "::"} {
		_, err := mail.New(mail.Config{URL: u})
		require.Error(t, err, u)
	}
	for _, u := range []string{"smtp://user:pw@mail.example.com", "smtps://mail.example.com", "smtp://mail.example.com:2525?starttls=required"} {
		_, err := mail.New(mail.Config{URL: u})
		require.NoError(t, err, u)
	}
}

// numbered is msg with its own Message-ID.
func numbered(i int) service.Message {
	m := msg
	m.MessageID = fmt.Sprintf("receipt.ride-%d@example.com", i)
	return m
}

func TestSendReusesSessions(t *testing.T) {
	t.Parallel()
	sink, url := setup(t)
	m, err := mail.New(mail.Config{URL: url})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })

	for i := range 5 {
		require.NoError(t, m.Send(context.Background(), numbered(i)))
	}
	require.Equal(t, 1, sink.Connections(), "one session carries every message")
	ids := sink.CountByMessageID()
	require.Len(t, ids, 5)
	for id, n := range ids {
		require.Equal(t, 1, n, id)
	}
}

func TestSendRedialsWhenTheServerDroppedTheSession(t *testing.T) {
	t.Parallel()
	sink, url := setup(t)
	m, err := mail.New(mail.Config{URL: url})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })

	require.NoError(t, m.Send(context.Background(), numbered(1)))
	sink.DropConnections()
	require.NoError(t, m.Send(context.Background(), numbered(2)))
	require.Equal(t, 2, sink.Connections())
	require.Equal(t, map[string]int{"receipt.ride-1@example.com": 1, "receipt.ride-2@example.com": 1}, sink.CountByMessageID(),
		"the message after the drop goes over a new session, once")
}

func TestSendKeepsNoSessionWhenToldNot(t *testing.T) {
	t.Parallel()
	sink, url := setup(t)
	m, err := mail.New(mail.Config{URL: url, MaxIdle: -1})
	require.NoError(t, err)
	for i := range 3 {
		require.NoError(t, m.Send(context.Background(), numbered(i)))
	}
	require.Equal(t, 3, sink.Connections())
}

func TestSendConcurrently(t *testing.T) {
	t.Parallel()
	sink, url := setup(t)
	m, err := mail.New(mail.Config{URL: url})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })

	const senders, each = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, senders*each)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				errs <- m.Send(context.Background(), numbered(s*each+i))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	ids := sink.CountByMessageID()
	require.Len(t, ids, senders*each)
	for id, n := range ids {
		require.Equal(t, 1, n, id)
	}
	require.LessOrEqual(t, sink.Connections(), senders, "no more sessions than concurrent senders")
}

func TestCloseEndsIdleSessions(t *testing.T) {
	t.Parallel()
	sink, url := setup(t)
	m, err := mail.New(mail.Config{URL: url})
	require.NoError(t, err)
	require.NoError(t, m.Send(context.Background(), numbered(1)))
	require.NoError(t, m.Close())
	require.NoError(t, m.Send(context.Background(), numbered(2)), "a send after Close still delivers")
	require.Equal(t, 2, sink.Connections())
	require.Equal(t, 2, sink.Count())
}
