// Package mailsink is a small SMTP server that keeps what it receives: the
// receipts' destination in tests and in a development run without a mail
// server. It speaks enough SMTP for any client (EHLO, MAIL, RCPT, DATA,
// RSET, NOOP, QUIT), without TLS or authentication, and can be told to
// refuse messages so that retries can be tested.
package mailsink

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/mail"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Message is one message the sink accepted.
type Message struct {
	From string
	To   []string
	// MessageID is the Message-ID header without angle brackets.
	MessageID string
	Subject   string
	// Data is the message as received, headers included, CRLF line endings.
	Data     []byte
	Received time.Time
}

// Options configure a Sink.
type Options struct {
	// Dir, when set, receives every accepted message as an .eml file.
	Dir    string
	Logger *slog.Logger
}

// Sink is an SMTP server that stores messages in memory. It is safe for
// concurrent use.
type Sink struct {
	opts Options

	mu       sync.Mutex
	messages []Message
	changed  chan struct{} // closed and replaced on every accepted message
	refuse   int           // number of messages still to refuse
	refuseAs int           // the SMTP code they are refused with
	accepted int           // connections accepted so far
	open     map[net.Conn]struct{}
}

// New returns a Sink; Start serves it.
func New(opts Options) *Sink {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Sink{opts: opts, changed: make(chan struct{})}
}

// Start listens on addr (e.g. "127.0.0.1:0") and serves until stop is
// called. It returns the sink's URL, e.g. "smtp://127.0.0.1:2525".
func (s *Sink) Start(addr string) (url string, stop func(context.Context) error, err error) {
	if s.opts.Dir != "" {
		if err := os.MkdirAll(s.opts.Dir, 0o755); err != nil {
			return "", nil, err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	var wg sync.WaitGroup
	s.mu.Lock()
	s.open = make(map[net.Conn]struct{})
	s.mu.Unlock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.open[c] = struct{}{}
			s.accepted++
			s.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.serveConn(c)
				s.mu.Lock()
				delete(s.open, c)
				s.mu.Unlock()
			}()
		}
	}()
	stop = func(ctx context.Context) error {
		err := ln.Close()
		s.DropConnections()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
		return err
	}
	return "smtp://" + ln.Addr().String(), stop, nil
}

// Connections is the number of SMTP connections accepted so far.
func (s *Sink) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// DropConnections closes every open connection without a word, as a server
// does that ends idle sessions or restarts.
func (s *Sink) DropConnections() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.open {
		_ = c.Close()
	}
}

// Refuse makes the sink refuse the next n messages at the end of DATA with
// the given SMTP code (e.g. 451, a temporary failure).
func (s *Sink) Refuse(n, code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse, s.refuseAs = n, code
}

// Messages returns a copy of the accepted messages, in order.
func (s *Sink) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.messages...)
}

// Count returns the number of accepted messages.
func (s *Sink) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.messages)
}

// CountByMessageID returns how many accepted messages carry each Message-ID.
func (s *Sink) CountByMessageID() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int)
	for _, m := range s.messages {
		out[m.MessageID]++
	}
	return out
}

// Wait blocks until the sink has accepted at least n messages or ctx ends.
func (s *Sink) Wait(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		got, changed := len(s.messages), s.changed
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("mailsink: %d of %d messages: %w", got, n, ctx.Err())
		}
	}
}

func (s *Sink) serveConn(nc net.Conn) {
	defer nc.Close()
	c := textproto.NewConn(nc)
	reply := func(code int, msg string) bool {
		return c.PrintfLine("%d %s", code, msg) == nil
	}
	if !reply(220, "mailsink ready") {
		return
	}
	var from string
	var to []string
	for {
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Minute))
		line, err := c.ReadLine()
		if err != nil {
			return
		}
		verb, arg, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "EHLO", "HELO":
			from, to = "", nil
			reply(250, "mailsink")
		case "MAIL":
			from, to = pathArg(arg, "FROM:"), nil
			reply(250, "ok")
		case "RCPT":
			if from == "" {
				reply(503, "MAIL first")
				continue
			}
			to = append(to, pathArg(arg, "TO:"))
			reply(250, "ok")
		case "DATA":
			if len(to) == 0 {
				reply(503, "RCPT first")
				continue
			}
			if !reply(354, "end with <CRLF>.<CRLF>") {
				return
			}
			data, err := c.ReadDotBytes()
			if err != nil {
				return
			}
			code, msg := s.accept(from, to, data)
			from, to = "", nil
			reply(code, msg)
		case "RSET":
			from, to = "", nil
			reply(250, "ok")
		case "NOOP":
			reply(250, "ok")
		case "QUIT":
			reply(221, "bye")
			return
		default:
			reply(502, "not implemented")
		}
	}
}

// accept stores a message, or refuses it when told to.
func (s *Sink) accept(from string, to []string, data []byte) (int, string) {
	// ReadDotBytes turns CRLF into LF; store the message as it was sent.
	data = bytes.ReplaceAll(data, []byte("\n"), []byte("\r\n"))
	m := Message{From: from, To: to, Data: data, Received: time.Now()}
	if parsed, err := mail.ReadMessage(bufio.NewReader(bytes.NewReader(data))); err == nil {
		m.MessageID = strings.Trim(parsed.Header.Get("Message-Id"), "<>")
		m.Subject = parsed.Header.Get("Subject")
	}

	s.mu.Lock()
	if s.refuse > 0 {
		s.refuse--
		code := s.refuseAs
		s.mu.Unlock()
		return code, "refused for a test"
	}
	s.messages = append(s.messages, m)
	close(s.changed)
	s.changed = make(chan struct{})
	n := len(s.messages)
	s.mu.Unlock()

	s.opts.Logger.Info("mailsink: message received", "to", strings.Join(to, ","), "subject", m.Subject, "message_id", m.MessageID)
	if s.opts.Dir != "" {
		name := fmt.Sprintf("%s-%04d.eml", m.Received.UTC().Format("20060102T150405"), n)
		if err := os.WriteFile(filepath.Join(s.opts.Dir, name), data, 0o644); err != nil {
			s.opts.Logger.Error("mailsink: write message", "err", err)
		}
	}
	return 250, "queued"
}

// pathArg extracts the address of "FROM:<a@b> SIZE=…".
func pathArg(arg, prefix string) string {
	if len(arg) >= len(prefix) && strings.EqualFold(arg[:len(prefix)], prefix) {
		arg = arg[len(prefix):]
	}
	arg = strings.TrimSpace(arg)
	if i := strings.IndexByte(arg, '>'); strings.HasPrefix(arg, "<") && i > 0 {
		return arg[1:i]
	}
	addr, _, _ := strings.Cut(arg, " ")
	return addr
}
