package mail

import (
	"context"
	"net"
	"net/smtp"
	"sync"
	"time"
)

// session is one open SMTP connection, past its greeting, EHLO, STARTTLS
// and AUTH, between mail transactions.
type session struct {
	conn     net.Conn
	c        *smtp.Client
	lastUsed time.Time
}

// bind bounds the session's I/O by ctx: its deadline, and its cancellation.
// The returned function releases ctx's hold on the connection.
func (s *session) bind(ctx context.Context) func() {
	if d, ok := ctx.Deadline(); ok {
		_ = s.conn.SetDeadline(d)
	} else {
		_ = s.conn.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { _ = s.conn.SetDeadline(time.Now()) })
	return func() { stop() }
}

// close ends the session without a word to the server.
func (s *session) close() { _ = s.conn.Close() }

// quit ends the session politely, within a second.
func (s *session) quit() {
	_ = s.conn.SetDeadline(time.Now().Add(time.Second))
	_ = s.c.Quit()
	s.close()
}

// sessionPool keeps up to max idle sessions, most recently used first, and
// ends those idle longer than idle.
type sessionPool struct {
	max  int
	idle time.Duration

	mu     sync.Mutex
	free   []*session // most recently used last
	closed bool
}

func newSessionPool(max int, idle time.Duration) *sessionPool {
	return &sessionPool{max: max, idle: idle}
}

// get takes the most recently used idle session, or returns nil. Sessions
// idle for too long are ended on the way.
func (p *sessionPool) get() *session {
	p.mu.Lock()
	var stale []*session
	var s *session
	now := time.Now()
	for len(p.free) > 0 {
		last := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		if now.Sub(last.lastUsed) < p.idle {
			s = last
			break
		}
		stale = append(stale, last)
	}
	// Older ones than a stale session are stale too.
	for len(p.free) > 0 && now.Sub(p.free[0].lastUsed) >= p.idle {
		stale = append(stale, p.free[0])
		p.free = p.free[1:]
	}
	p.mu.Unlock()
	for _, st := range stale {
		go st.quit()
	}
	return s
}

// put returns s for reuse, or ends it when the pool is full or closed.
func (p *sessionPool) put(s *session) {
	s.lastUsed = time.Now()
	p.mu.Lock()
	if p.closed || len(p.free) >= p.max {
		p.mu.Unlock()
		s.quit()
		return
	}
	p.free = append(p.free, s)
	p.mu.Unlock()
}

// close ends every idle session, and every session put back from now on.
func (p *sessionPool) close() {
	p.mu.Lock()
	free := p.free
	p.free, p.closed = nil, true
	p.mu.Unlock()
	for _, s := range free {
		s.quit()
	}
}
