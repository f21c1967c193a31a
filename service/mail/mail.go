// Package mail is the SMTP adapter of service.Mailer.
package mail

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/smtp"
	"net/url"
	"strings"
	"time"

	"github.com/atomicrides/atomicrides/service"
)

const (
	// DefaultTimeout bounds one send when Config.Timeout is zero.
	DefaultTimeout = 30 * time.Second
	// DefaultMaxIdle is the number of idle sessions kept when
	// Config.MaxIdle is zero.
	DefaultMaxIdle = 4
	// DefaultIdleTimeout ends an idle session when Config.IdleTimeout is
	// zero.
	DefaultIdleTimeout = 30 * time.Second
)

// Config configures an SMTP mailer.
type Config struct {
	// URL is the SMTP server: smtp://[user:password@]host[:port] (port 587
	// by default; STARTTLS is used when the server offers it, and required
	// when ?starttls=required), or smtps://… for implicit TLS (port 465).
	URL string
	// Timeout bounds one send, connection included. Default DefaultTimeout.
	Timeout time.Duration
	// TLSConfig overrides the TLS settings (tests use it for a private CA).
	TLSConfig *tls.Config
	// MaxIdle is the number of sessions kept open between messages.
	// Default DefaultMaxIdle; negative keeps none.
	MaxIdle int
	// IdleTimeout ends a session unused for that long. Default
	// DefaultIdleTimeout, well under the five minutes RFC 5321 gives a
	// server before it may close an idle session.
	IdleTimeout time.Duration
}

// Mailer sends messages over SMTP. It keeps up to Config.MaxIdle sessions
// open between messages (one mail transaction at a time on each), so a
// steady stream of receipts costs no connection, greeting or TLS handshake
// per message.
type Mailer struct {
	pool      *sessionPool
	addr      string
	host      string
	auth      smtp.Auth
	implicit  bool
	startTLS  string // "", "required"
	timeout   time.Duration
	tlsConfig *tls.Config
}

var _ service.Mailer = (*Mailer)(nil)

// New parses cfg.URL and returns a Mailer. It does not connect.
func New(cfg Config) (*Mailer, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		// url.Error repeats the URL, password included: keep only the cause.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, fmt.Errorf("SMTP URL: not a URL: %w", err)
	}
	m := &Mailer{host: u.Hostname(), timeout: cfg.Timeout, startTLS: u.Query().Get("starttls")}
	if m.timeout == 0 {
		m.timeout = DefaultTimeout
	}
	port := u.Port()
	switch u.Scheme {
	case "smtp":
		if port == "" {
			port = "587"
		}
	case "smtps":
		m.implicit = true
		if port == "" {
			port = "465"
		}
	default:
		return nil, fmt.Errorf("SMTP URL: scheme %q: want smtp or smtps", u.Scheme)
	}
	if m.host == "" {
		return nil, errors.New("SMTP URL: no host")
	}
	if m.startTLS != "" && m.startTLS != "required" {
		return nil, fmt.Errorf("SMTP URL: starttls=%q: want required or nothing", m.startTLS)
	}
	m.addr = net.JoinHostPort(m.host, port)
	if u.User != nil {
		pw, _ := u.User.Password()
		m.auth = smtp.PlainAuth("", u.User.Username(), pw, m.host)
	}
	m.tlsConfig = cfg.TLSConfig
	if m.tlsConfig == nil {
		m.tlsConfig = &tls.Config{ServerName: m.host, MinVersion: tls.VersionTLS12}
	}
	maxIdle, idle := cfg.MaxIdle, cfg.IdleTimeout
	if maxIdle == 0 {
		maxIdle = DefaultMaxIdle
	}
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	m.pool = newSessionPool(max(maxIdle, 0), idle)
	return m, nil
}

// send delivers msg over a pooled session, or a new one. The whole
// exchange is bounded by the configured timeout and by ctx.
//
// A pooled session is first checked with RSET: a server that closed it
// while idle fails there, before any part of msg was sent, so the message
// goes over a new connection instead and is never sent twice. Any failure
// after MAIL FROM ends the session and is returned: msg may or may not have
// been accepted, as Mailer's contract says.
func (m *Mailer) send(ctx context.Context, msg service.Message) error {
	if err := msg.Validate(); err != nil {
		return err
	}
	data, err := Format(msg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()

	s := m.pool.get()
	if s != nil {
		stop := s.bind(ctx)
		if err := s.c.Reset(); err != nil {
			stop()
			s.close()
			s = nil
		} else {
			stop()
		}
	}
	if s == nil {
		if s, err = m.dial(ctx); err != nil {
			return err
		}
	}
	stop := s.bind(ctx)
	err = deliver(s.c, msg, data)
	stop()
	if err != nil {
		s.close()
		return err
	}
	m.pool.put(s)
	return nil
}

// dial opens a session: connection, greeting, EHLO, STARTTLS and AUTH as
// configured.
func (m *Mailer) dial(ctx context.Context) (*session, error) {
	var conn net.Conn
	var err error
	d := &net.Dialer{}
	if m.implicit {
		conn, err = (&tls.Dialer{NetDialer: d, Config: m.tlsConfig}).DialContext(ctx, "tcp", m.addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", m.addr)
	}
	if err != nil {
		return nil, fmt.Errorf("smtp dial %s: %w", m.addr, err)
	}
	s := &session{conn: conn}
	stop := s.bind(ctx)
	defer stop()
	fail := func(err error) (*session, error) {
		_ = conn.Close()
		return nil, err
	}
	c, err := smtp.NewClient(conn, m.host)
	if err != nil {
		return fail(fmt.Errorf("smtp greeting: %w", err))
	}
	s.c = c
	if err := c.Hello("localhost"); err != nil {
		return fail(fmt.Errorf("smtp hello: %w", err))
	}
	if !m.implicit {
		if ok, _ := c.Extension("STARTTLS"); ok {
			if err := c.StartTLS(m.tlsConfig); err != nil {
				return fail(fmt.Errorf("smtp starttls: %w", err))
			}
		} else if m.startTLS == "required" {
			return fail(errors.New("smtp: the server does not offer STARTTLS, and it is required"))
		}
	}
	if m.auth != nil {
		if err := c.Auth(m.auth); err != nil {
			return fail(fmt.Errorf("smtp auth: %w", err))
		}
	}
	return s, nil
}

// deliver runs one mail transaction on c: MAIL FROM, RCPT TO, DATA.
func deliver(c *smtp.Client, msg service.Message, data []byte) error {
	if err := c.Mail(address(msg.From)); err != nil {
		return fmt.Errorf("smtp MAIL FROM: %w", err)
	}
	if err := c.Rcpt(address(msg.To)); err != nil {
		return fmt.Errorf("smtp RCPT TO: %w", err)
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("smtp DATA: %w", err)
	}
	if _, err := w.Write(data); err != nil {
		return fmt.Errorf("smtp write: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("smtp end of data: %w", err)
	}
	return nil
}

// Close ends the idle sessions (QUIT). Sends after Close still work, each
// over a connection of its own that is not kept.
func (m *Mailer) Close() error {
	m.pool.close()
	return nil
}

// Format renders msg as an RFC 5322 message with CRLF line endings.
func Format(msg service.Message) ([]byte, error) {
	if err := msg.Validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	header := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, v) }
	header("Message-ID", "<"+msg.MessageID+">")
	header("Date", msg.Date.Format(time.RFC1123Z))
	header("From", msg.From)
	header("To", msg.To)
	header("Subject", mime.QEncoding.Encode("utf-8", msg.Subject))
	header("MIME-Version", "1.0")
	header("Content-Type", `text/plain; charset="utf-8"`)
	header("Content-Transfer-Encoding", "8bit")
	b.WriteString("\r\n")
	text := strings.ReplaceAll(msg.Text, "\r\n", "\n")
	b.WriteString(strings.ReplaceAll(text, "\n", "\r\n"))
	if !strings.HasSuffix(text, "\n") {
		b.WriteString("\r\n")
	}
	return b.Bytes(), nil
}

// address is the bare address of "Name <addr>" or "addr".
func address(s string) string {
	if i := strings.LastIndexByte(s, '<'); i >= 0 {
		return strings.TrimSuffix(s[i+1:], ">")
	}
	return s
}
