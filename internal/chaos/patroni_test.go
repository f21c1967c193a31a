package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/internal/pgenv"
)

// TestChaosPatroniShort: the database is a Patroni cluster on etcd (a
// leader and a synchronous standby); the leader's Patroni and PostgreSQL
// are SIGKILLed under load and Patroni, not the test, promotes the
// standby. Part of `go tool task test`.
func TestChaosPatroniShort(t *testing.T) {
	runFailover(t, failoverPlan{
		name: "short: Patroni fails over to its synchronous standby", logs: "patroni", db: chaosDBPatroni,
		users: 5, clients: 8, before: 5 * time.Second, after: 5 * time.Second,
		settle: 60 * time.Second, bound: 4 * time.Minute,
	})
}

// TestChaosPatroni is the Patroni failover with more load: `go tool task
// chaos` runs it.
func TestChaosPatroni(t *testing.T) {
	if !*chaosFullFlag {
		t.Skip("the full Patroni run needs -chaos.full (go tool task chaos); TestChaosPatroniShort is its short form")
	}
	runFailover(t, failoverPlan{
		name: "full: Patroni fails over to its synchronous standby", logs: "patroni", db: chaosDBPatroni,
		users: 10, clients: 12, before: 30 * time.Second, after: 30 * time.Second,
		settle: 80 * time.Second, bound: 5 * time.Minute,
	})
}

// TestChaosPatroniEtcdShort: etcd, Patroni's only state store, is killed
// under load for longer than the leader key's TTL, then started again. The
// cluster never has two primaries, the service answers without a primary
// with retryable errors only, and recovers by itself.
func TestChaosPatroniEtcdShort(t *testing.T) {
	runFailover(t, failoverPlan{
		name: "short: Patroni loses etcd for 15s", logs: "patroni-etcd", db: chaosDBPatroni,
		users: 5, clients: 8, before: 5 * time.Second, etcdDown: 15 * time.Second, after: 5 * time.Second,
		settle: 60 * time.Second, bound: 4 * time.Minute,
	})
}

// TestChaosPatroniEtcd is the etcd outage with more load: `go tool task
// chaos` runs it.
func TestChaosPatroniEtcd(t *testing.T) {
	if !*chaosFullFlag {
		t.Skip("the full etcd outage run needs -chaos.full (go tool task chaos); TestChaosPatroniEtcdShort is its short form")
	}
	runFailover(t, failoverPlan{
		name: "full: Patroni loses etcd for 40s", logs: "patroni-etcd", db: chaosDBPatroni,
		users: 10, clients: 12, before: 20 * time.Second, etcdDown: 4 * chaosPatroniTTL, after: 20 * time.Second,
		settle: 80 * time.Second, bound: 5 * time.Minute,
	})
}

// patroniFigures is the failover as Patroni's REST API showed it.
type patroniFigures struct {
	leader, survivor *pgenv.PatroniNode
	// killed: the leader's Patroni and every PostgreSQL process were gone;
	// detected: the survivor's /cluster no longer named the old leader
	// (its key expired in etcd); locked: the survivor's Patroni logged
	// that it took the leader lock to promote itself; promoted: the
	// survivor's /patroni reported it running as the primary.
	killed, detected, locked, promoted time.Time
}

func (f *patroniFigures) report(before time.Duration) string {
	return fmt.Sprintf("Patroni: leader %s SIGKILLed (its Patroni and every PostgreSQL process) after %s of load; "+
		"its leader key expired (ttl %s), as %s's REST API showed, +%s; %s's Patroni took the leader lock (its log) +%s; "+
		"%s promoted by Patroni (REST API: running as primary) +%s",
		f.leader.Name, before, chaosPatroniTTL, f.survivor.Name, f.detected.Sub(f.killed).Round(time.Millisecond),
		f.survivor.Name, since(f.killed, f.locked), f.survivor.Name, f.promoted.Sub(f.killed).Round(time.Millisecond))
}

// since renders at as an offset from t0, or "not seen".
func since(t0, at time.Time) string {
	if at.IsZero() {
		return "not seen"
	}
	return at.Sub(t0).Round(time.Millisecond).String()
}

// killLeader SIGKILLs the leader node and waits until Patroni has promoted
// the other.
func killLeader(ctx context.Context, sys *chaosSystem, flog *chaosFaultLog) (*patroniFigures, error) {
	p := sys.patroni
	leader, err := currentLeader(ctx, p)
	if err != nil {
		return nil, err
	}
	f := &patroniFigures{leader: leader}
	for _, n := range p.Nodes {
		if n != leader {
			f.survivor = n
		}
	}
	if err := p.KillNode(ctx, leader); err != nil {
		return nil, err
	}
	f.killed = time.Now()
	flog.event("Patroni leader %s killed (SIGKILL: Patroni and every PostgreSQL process)", leader.Name)
	err = poll(ctx, time.Minute, 20*time.Millisecond, func() error {
		if f.detected.IsZero() {
			if s, err := p.Status(ctx, f.survivor); err == nil && s.Leader() != leader.Name {
				f.detected = time.Now()
				flog.event("%s's REST API: leader %s gone", f.survivor.Name, leader.Name)
			}
		}
		st, err := f.survivor.State(ctx)
		if err != nil {
			return err
		}
		if !isPrimary(st) {
			return fmt.Errorf("%s is %s, %s", f.survivor.Name, st.Role, st.State)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("Patroni did not promote %s: %w", f.survivor.Name, err)
	}
	f.promoted = time.Now()
	if f.detected.IsZero() {
		f.detected = f.promoted
	}
	f.locked, _ = f.survivor.LogEvent(f.killed, "acquiring session lock")
	flog.event("%s promoted by Patroni", f.survivor.Name)
	return f, nil
}

func isPrimary(st pgenv.NodeState) bool {
	return (st.Role == "master" || st.Role == "primary") && st.State == "running"
}

// currentLeader is the node holding the leader key, running as primary.
func currentLeader(ctx context.Context, p *pgenv.Patroni) (*pgenv.PatroniNode, error) {
	var leader *pgenv.PatroniNode
	err := poll(ctx, time.Minute, 100*time.Millisecond, func() error {
		for _, n := range p.Nodes {
			if st, err := n.State(ctx); err == nil && isPrimary(st) {
				leader = n
				return nil
			}
		}
		return errors.New("no node runs as the primary")
	})
	return leader, err
}

// etcdOutage is what the cluster did while etcd was down: every node's
// PostgreSQL was asked, over and over, whether it takes writes.
type etcdOutage struct {
	leader  *pgenv.PatroniNode // before the outage
	primary *pgenv.PatroniNode // after it
	down    time.Duration
	// killed: etcd got SIGKILL; readOnly: from then, the first moment no
	// node took writes; back: etcd started again; takesWrites: the first
	// moment after that a node took writes again; writable: the first
	// moment one did that Patroni also calls the primary.
	killed, readOnly, back, takesWrites, writable time.Time
	// demoted: the old leader's Patroni logged that it demoted itself for
	// want of the DCS.
	demoted time.Time
	// samples of every node's answer; split counts those where two took
	// writes at once; writableDuringOutage those where the old leader
	// still took writes after etcd died.
	samples, split, writableDuringOutage int
}

func (o *etcdOutage) report(before time.Duration) string {
	readOnly := "never"
	if !o.readOnly.IsZero() {
		readOnly = "+" + o.readOnly.Sub(o.killed).Round(time.Millisecond).String()
	}
	return fmt.Sprintf("etcd: killed (SIGKILL) after %s of load, leader %s; its Patroni demoted it for want of the DCS (its log) +%s; no node took writes from %s (no failsafe_mode); "+
		"etcd started again +%s; %s took writes again +%s (%s after etcd came back; Patroni's REST API called it the primary +%s); "+
		"%d samples of both nodes, %d with two primaries",
		before, o.leader.Name, since(o.killed, o.demoted), readOnly, o.back.Sub(o.killed).Round(time.Millisecond), o.primary.Name,
		o.takesWrites.Sub(o.killed).Round(time.Millisecond), o.takesWrites.Sub(o.back).Round(time.Millisecond),
		o.writable.Sub(o.killed).Round(time.Millisecond), o.samples, o.split)
}

// killEtcd kills etcd for down, then starts it again, and returns once a
// node takes writes again; meanwhile it asks every node, every 100 ms,
// whether it takes writes.
func killEtcd(ctx context.Context, sys *chaosSystem, down time.Duration, flog *chaosFaultLog) (*etcdOutage, error) {
	p := sys.patroni
	leader, err := currentLeader(ctx, p)
	if err != nil {
		return nil, err
	}
	o := &etcdOutage{leader: leader, down: down, killed: time.Now()}
	p.StopEtcd()
	flog.event("etcd killed (SIGKILL)")
	sample := func() []*pgenv.PatroniNode {
		writable := make([]*pgenv.PatroniNode, len(p.Nodes))
		var wg sync.WaitGroup
		for i, n := range p.Nodes {
			wg.Go(func() {
				if takesWrites(ctx, n) {
					writable[i] = n
				}
			})
		}
		wg.Wait()
		var out []*pgenv.PatroniNode
		for _, n := range writable {
			if n != nil {
				out = append(out, n)
			}
		}
		o.samples++
		if len(out) > 1 {
			o.split++
		}
		return out
	}
	for time.Since(o.killed) < down {
		w := sample()
		if len(w) == 0 && o.readOnly.IsZero() {
			o.readOnly = time.Now()
			flog.event("no node takes writes")
		}
		if len(w) > 0 && !o.readOnly.IsZero() {
			o.writableDuringOutage++
		}
		if err := pause(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
	if err := p.StartEtcd(ctx); err != nil {
		return nil, err
	}
	o.back = time.Now()
	flog.event("etcd started again")
	err = poll(ctx, 2*time.Minute, 100*time.Millisecond, func() error {
		w := sample()
		if len(w) > 0 && o.takesWrites.IsZero() {
			o.takesWrites = time.Now()
		}
		if len(w) != 1 {
			return fmt.Errorf("%d nodes take writes", len(w))
		}
		if st, err := w[0].State(ctx); err != nil || !isPrimary(st) {
			return fmt.Errorf("%s takes writes but Patroni does not call it the primary yet", w[0].Name)
		}
		o.primary = w[0]
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("no primary after etcd came back: %w", err)
	}
	o.writable = time.Now()
	flog.event("%s takes writes again", o.primary.Name)
	o.demoted, _ = o.leader.LogEvent(o.killed, "demoting self because DCS is not accessible")
	return o, nil
}

// takesWrites reports whether n's PostgreSQL answers and is not in
// recovery.
func takesWrites(ctx context.Context, n *pgenv.PatroniNode) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.NodeURL("postgres"))
	if err != nil {
		return false
	}
	defer conn.Close(context.Background())
	var recovery bool
	return conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovery) == nil && !recovery
}

// poll calls f every interval until it returns nil, ctx ends or within
// passes.
func poll(ctx context.Context, within, interval time.Duration, f func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		if perr := pause(ctx, interval); perr != nil {
			return perr
		}
	}
}

// checkNoSplitBrain: at no sample did two nodes take writes at once.
func checkNoSplitBrain(o *etcdOutage) chaosCheck {
	return chaosCheck{id: "no_split_brain", name: "never two nodes taking writes at once (both asked every 100 ms through the outage)",
		expected: "0 samples with two primaries", actual: fmt.Sprintf("%d of %d samples", o.split, o.samples),
		ok: o.split == 0 && o.samples > 0}
}

// checkOutageAnswers: while no node took writes (requests sent after the
// first sample without a primary and answered before the first sample
// with one again), every error answer of the service was a retryable one
// (5xx, each with Retry-After) or none at all. The other answers are
// listed: replays from memory, and answers of requests that reached the
// database between two samples (samples are about 100 ms apart, more on
// a loaded machine); whether each is right is what the invariants check.
func checkOutageAnswers(attempts []chaosAttempt, o *etcdOutage) chaosCheck {
	from, to := o.readOnly, o.takesWrites
	counts := map[string]int{}
	bad := 0
	for _, a := range attempts {
		if from.IsZero() || a.sent.Before(from) || a.done.After(to) {
			continue
		}
		switch {
		case a.status == 0:
			counts["no answer"]++
		case a.status >= 500 && a.retryAfter:
			counts[fmt.Sprintf("%d with Retry-After", a.status)]++
		case a.status >= 500:
			counts[fmt.Sprintf("%d without Retry-After", a.status)]++
			bad++
		case a.status == http.StatusConflict && a.problem == "/problems/idempotency-key-in-use":
			counts["409 key in use"]++
		case a.replayed:
			counts["replays"]++ // answered from the process's memory
		default:
			counts[fmt.Sprintf("%d", a.status)]++
		}
	}
	var parts []string
	for _, k := range sortedKeys(counts) {
		parts = append(parts, fmt.Sprintf("%s×%d", k, counts[k]))
	}
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	return chaosCheck{id: "outage_answers", name: "while no node took writes, errors were 5xx with Retry-After (or no answer), never without",
		expected: "0 × 5xx without Retry-After", actual: strings.Join(parts, " "), ok: bad == 0 && !from.IsZero()}
}
