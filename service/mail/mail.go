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

// DefaultTimeout bounds one send when Config.Timeout is zero.
const DefaultTimeout = 30 * time.Second

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
}

// Mailer sends messages over SMTP, one connection per message.
type Mailer struct {
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
	return m, nil
}

// send delivers msg. The whole exchange is bounded by the configured timeout
// and by ctx.
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
	deadline, _ := ctx.Deadline()

	var conn net.Conn
	d := &net.Dialer{}
	if m.implicit {
		conn, err = (&tls.Dialer{NetDialer: d, Config: m.tlsConfig}).DialContext(ctx, "tcp", m.addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", m.addr)
	}
	if err != nil {
		return fmt.Errorf("smtp dial %s: %w", m.addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()

	c, err := smtp.NewClient(conn, m.host)
	if err != nil {
		return fmt.Errorf("smtp greeting: %w", err)
	}
	defer c.Close()
	if err := c.Hello("localhost"); err != nil {
		return fmt.Errorf("smtp hello: %w", err)
	}
	if !m.implicit {
		if ok, _ := c.Extension("STARTTLS"); ok {
			if err := c.StartTLS(m.tlsConfig); err != nil {
				return fmt.Errorf("smtp starttls: %w", err)
			}
		} else if m.startTLS == "required" {
			return errors.New("smtp: the server does not offer STARTTLS, and it is required")
		}
	}
	if m.auth != nil {
		if err := c.Auth(m.auth); err != nil {
			return fmt.Errorf("smtp auth: %w", err)
		}
	}
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
	// The server accepted the message; a failed QUIT changes nothing.
	_ = c.Quit()
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
