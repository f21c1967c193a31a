package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux the project runs on).
const clockTick = 10 * time.Millisecond

// procCPU returns the CPU time (user + system, every thread) that process pid
// has used so far, and false when /proc does not have it (the process has
// exited).
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold spaces: fields count from
	// the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+st) * clockTick, true
}

// cpuShare is the CPU one process, or one group of processes, spent per
// unit of work (a ride, a replay, a request) during a measurement.
type cpuShare struct {
	// Postgres is the CPU of the measured database's backends (client
	// backends and autovacuum workers of that database; not the cluster's
	// shared processes: WAL writer, checkpointer).
	Postgres time.Duration
	// Server is the serve process (HTTP, River, the built-in mail sink).
	Server time.Duration
	// Stripe is the fake Stripe's process.
	Stripe time.Duration
	// Mail is the mail sink's process, which receives the receipts.
	Mail time.Duration
	// Load is the load generator: the harness's own process for the
	// service, pgbench for the baselines.
	Load time.Duration
}

// Total is the CPU of every process counted.
func (c cpuShare) Total() time.Duration { return c.Postgres + c.Server + c.Stripe + c.Mail + c.Load }

// cpuSampler follows the CPU of the processes of one measurement: the
// backends of one database (found in pg_stat_activity as they come and go)
// and fixed processes. It samples every interval, so that a backend that
// exits loses at most one interval of its CPU; the figures are taken between
// two samples inside the measured window.
type cpuSampler struct {
	admin    *pgxpool.Pool
	db       string
	server   int
	stripe   int
	mail     int
	interval time.Duration

	mu sync.Mutex
	// first and last are the CPU of each backend at its first and latest
	// sample; a backend first seen after the start counts from zero.
	first, last map[int]time.Duration
	started     bool
	// base holds the fixed processes' CPU at the start.
	base    cpuShare
	startAt time.Time
	stop    chan struct{}
	done    chan struct{}
}

// startCPU starts sampling the CPU of db's backends and of the given
// processes (0: not measured), the harness's own process as the load
// generator.
func startCPU(admin *pgxpool.Pool, db string, server, stripe, mail int) *cpuSampler {
	s := &cpuSampler{
		admin: admin, db: db, server: server, stripe: stripe, mail: mail, interval: 50 * time.Millisecond,
		first: map[int]time.Duration{}, last: map[int]time.Duration{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	s.sample()
	s.base = s.fixed()
	s.startAt = time.Now()
	s.started = true
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *cpuSampler) pids() []int {
	rows, err := s.admin.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE datname = $1`, s.db)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (s *cpuSampler) sample() {
	pids := s.pids()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pid := range pids {
		cpu, ok := procCPU(pid)
		if !ok {
			continue
		}
		if _, seen := s.first[pid]; !seen {
			if s.started {
				s.first[pid] = 0
			} else {
				s.first[pid] = cpu
			}
		}
		s.last[pid] = cpu
	}
}

func (s *cpuSampler) fixed() cpuShare {
	var c cpuShare
	if s.server > 0 {
		c.Server, _ = procCPU(s.server)
	}
	if s.stripe > 0 {
		c.Stripe, _ = procCPU(s.stripe)
	}
	if s.mail > 0 {
		c.Mail, _ = procCPU(s.mail)
	}
	c.Load, _ = procCPU(os.Getpid())
	return c
}

// finish takes a last sample and returns the CPU each process spent since
// the start, divided by units (0: the totals), and the time it covers.
func (s *cpuSampler) finish(units int) (cpuShare, time.Duration) {
	s.sample()
	end := s.fixed()
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	var c cpuShare
	for pid, last := range s.last {
		c.Postgres += last - s.first[pid]
	}
	c.Server, c.Stripe, c.Mail, c.Load = end.Server-s.base.Server, end.Stripe-s.base.Stripe, end.Mail-s.base.Mail, end.Load-s.base.Load
	if units > 0 {
		n := time.Duration(units)
		c = cpuShare{Postgres: c.Postgres / n, Server: c.Server / n, Stripe: c.Stripe / n, Mail: c.Mail / n, Load: c.Load / n}
	}
	return c, time.Since(s.startAt)
}
