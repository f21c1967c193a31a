package pgenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// PatroniOptions adjust the cluster StartPatroni starts.
type PatroniOptions struct {
	// Nodes is how many PostgreSQL nodes Patroni manages; zero means 2.
	Nodes int
	// TTL is the leader key's time to live in etcd (Patroni's ttl): how long
	// a dead leader holds the key before a replica may take it. Zero means
	// 10 s; LoopWait (loop_wait) is Patroni's cycle, zero means 1 s.
	TTL, LoopWait time.Duration
	// Ports gives the ports to ask for, each used once: etcd's client and
	// peer ports, then each node's PostgreSQL and REST API port. Missing
	// ones are picked free.
	Ports []int
}

// Patroni is a high-availability cluster as operators run one: an etcd
// member holding the cluster's state, and PostgreSQL nodes, each managed
// by a Patroni process that elects a leader through etcd, makes the others
// stream from it (synchronous_mode: a commit waits for a synchronous
// standby), and promotes a replica when the leader's key expires. Every
// process runs as a child of the process that started it, PostgreSQL and
// Patroni as the cluster account (see StartCluster), until Stop.
type Patroni struct {
	// Root holds every file: etcd's data, each node's settings, data and
	// log.
	Root string
	// EtcdURL is etcd's client URL.
	EtcdURL string
	// Nodes are the PostgreSQL nodes, in the order they were started (the
	// first bootstraps the cluster).
	Nodes []*PatroniNode

	ttl, loopWait time.Duration
	etcd          *child
	etcdArgs      []string
	binDir        string
	acct          *account
}

// PatroniNode is one PostgreSQL node and its Patroni.
type PatroniNode struct {
	// Name is the node's Patroni name.
	Name string
	// Port is PostgreSQL's port on 127.0.0.1, APIPort Patroni's REST API's.
	Port, APIPort int
	// DataDir is the node's PGDATA.
	DataDir string
	// Log is the Patroni process's log, which holds PostgreSQL's too.
	Log string

	config  string
	patroni *child
}

// child is a process started by pgenv that runs until stopped.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startChild(cmd *exec.Cmd, logPath string) (*child, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgenv: %w", err)
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgenv: start %s: %w", cmd.Path, err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) running() bool {
	if c == nil {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// signal sends sig and waits up to wait for the exit, then kills.
func (c *child) signal(sig syscall.Signal, wait time.Duration) {
	if !c.running() {
		return
	}
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.done:
	case <-time.After(wait):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// StartPatroni starts etcd and the nodes, their files under dir, and
// returns once a leader takes writes and every other node streams from it
// as a synchronous or quorum standby. PostgreSQL is crash-safe
// (synchronous_commit on) and durable against nothing more (fsync off).
func StartPatroni(ctx context.Context, dir string, opts PatroniOptions) (*Patroni, error) {
	for _, prog := range []string{"patroni", "etcd"} {
		if _, err := exec.LookPath(prog); err != nil {
			return nil, fmt.Errorf("pgenv: %s not found on PATH (Debian: apt-get install patroni etcd-server): %w", prog, err)
		}
	}
	binDir, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	acct, err := clusterAccount()
	if err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, fmt.Errorf("pgenv: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pgenv: %w", err)
	}
	root, err := chooseRoot(ctx, dir, nil, acct)
	if err != nil {
		return nil, err
	}
	p := &Patroni{Root: root, ttl: opts.TTL, loopWait: opts.LoopWait, binDir: binDir, acct: acct}
	if p.ttl == 0 {
		p.ttl = 10 * time.Second
	}
	if p.loopWait == 0 {
		p.loopWait = time.Second
	}
	nodes := opts.Nodes
	if nodes == 0 {
		nodes = 2
	}
	tried := map[int]bool{}
	ports := opts.Ports
	port := func() (int, error) {
		var prefer []int
		if len(ports) > 0 {
			prefer, ports = ports[:1], ports[1:]
		}
		n, err := freePort(prefer, tried)
		tried[n] = true
		return n, err
	}
	ok := false
	defer func() {
		if !ok {
			p.Stop()
		}
	}()

	clientPort, err1 := port()
	peerPort, err2 := port()
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	if err := p.startEtcd(ctx, clientPort, peerPort); err != nil {
		return nil, err
	}
	for i := range nodes {
		pgPort, err1 := port()
		apiPort, err2 := port()
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		n := &PatroniNode{Name: fmt.Sprintf("node%d", i), Port: pgPort, APIPort: apiPort}
		if err := p.startNode(n); err != nil {
			return nil, err
		}
		p.Nodes = append(p.Nodes, n)
		if i == 0 {
			// The first bootstraps alone; the others copy it.
			if err := p.waitFor(ctx, readyTimeout, func(s PatroniStatus) bool { return s.Leader() == n.Name }); err != nil {
				return nil, fmt.Errorf("pgenv: %s did not bootstrap the cluster: %w (see %s)", n.Name, err, n.Log)
			}
		}
	}
	err = p.waitFor(ctx, 2*readyTimeout, func(s PatroniStatus) bool {
		streaming := 0
		for _, m := range s.Members {
			if m.Role != "leader" && m.State == "streaming" || m.State == "running" && m.Role != "leader" {
				streaming++
			}
		}
		return s.Leader() != "" && streaming == nodes-1 && s.SyncStandbys() > 0
	})
	if err != nil {
		return nil, fmt.Errorf("pgenv: the Patroni cluster did not form: %w (see %s)", err, filepath.Join(root, "*.log"))
	}
	ok = true
	return p, nil
}

func (p *Patroni) startEtcd(ctx context.Context, clientPort, peerPort int) error {
	p.EtcdURL = fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	p.etcdArgs = []string{
		"--name", "etcd0", "--data-dir", filepath.Join(p.Root, "etcd"),
		"--listen-client-urls", p.EtcdURL, "--advertise-client-urls", p.EtcdURL,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "etcd0=" + peer, "--initial-cluster-state", "new",
		"--initial-cluster-token", filepath.Base(p.Root),
	}
	if err := p.StartEtcd(ctx); err != nil {
		return err
	}
	return nil
}

// StartEtcd starts etcd (again, after StopEtcd) on its ports and data, and
// returns once it answers.
func (p *Patroni) StartEtcd(ctx context.Context) error {
	// etcd runs as root as well as any; it gets no credentials.
	cmd := exec.Command("etcd", p.etcdArgs...)
	cmd.Env = append(os.Environ(), "ETCD_UNSUPPORTED_ARCH=")
	c, err := startChild(cmd, filepath.Join(p.Root, "etcd.log"))
	if err != nil {
		return err
	}
	p.etcd = c
	err = pollUntil(ctx, readyTimeout, func() error {
		if !c.running() {
			return errors.New("etcd exited")
		}
		resp, err := http.Get(p.EtcdURL + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd /health: %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgenv: etcd did not start: %w\n%s says:\n%s", err, filepath.Join(p.Root, "etcd.log"), lastLines(readFrom(filepath.Join(p.Root, "etcd.log"), 0), 20))
	}
	return nil
}

// StopEtcd kills etcd (SIGKILL): the cluster loses its state store until
// StartEtcd.
func (p *Patroni) StopEtcd() { p.etcd.signal(syscall.SIGKILL, 10*time.Second) }

func (p *Patroni) startNode(n *PatroniNode) error {
	dir := filepath.Join(p.Root, n.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pgenv: %w", err)
	}
	n.DataDir = filepath.Join(dir, "data")
	n.Log = filepath.Join(p.Root, n.Name+".log")
	n.config = filepath.Join(dir, "patroni.yml")
	sockDir := dir
	if len(sockDir)+len("/.s.PGSQL.65535.lock") > maxSocketPath {
		sockDir = ""
	}
	// JSON is YAML: the settings are written with encoding/json.
	conf := map[string]any{
		"scope":   filepath.Base(p.Root),
		"name":    n.Name,
		"log":     map[string]any{"level": "INFO"},
		"restapi": map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", n.APIPort), "connect_address": fmt.Sprintf("127.0.0.1:%d", n.APIPort)},
		"etcd3":   map[string]any{"hosts": []string{strings.TrimPrefix(p.EtcdURL, "http://")}},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl": int(p.ttl / time.Second), "loop_wait": int(p.loopWait / time.Second), "retry_timeout": int(p.ttl / time.Second / 2),
				// A replica more than 1 MiB behind is never promoted; in
				// synchronous mode only the synchronous standby is.
				"maximum_lag_on_failover": 1 << 20,
				"synchronous_mode":        true,
				"postgresql": map[string]any{
					"use_pg_rewind": false,
					"parameters": map[string]any{
						"max_connections": 300, "wal_level": "replica", "max_wal_senders": 10, "max_replication_slots": 10,
						"wal_keep_size": "512MB", "hot_standby": "on", "fsync": "off", "full_page_writes": "off",
						"synchronous_commit": "on", "shared_buffers": "64MB",
					},
				},
			},
			"initdb": []any{map[string]string{"encoding": "UTF8"}, "no-locale", "no-sync"},
		},
		"postgresql": map[string]any{
			"listen":          fmt.Sprintf("127.0.0.1:%d", n.Port),
			"connect_address": fmt.Sprintf("127.0.0.1:%d", n.Port),
			"data_dir":        n.DataDir,
			"bin_dir":         p.binDir,
			"pgpass":          filepath.Join(dir, "pgpass"),
			"authentication": map[string]any{
				"superuser":   map[string]string{"username": Superuser},
				"replication": map[string]string{"username": Superuser},
			},
			"pg_hba": []string{
				"local all all trust",
				"host all all 127.0.0.1/32 trust",
				"host replication all 127.0.0.1/32 trust",
			},
			"parameters": map[string]any{"unix_socket_directories": sockDir},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return fmt.Errorf("pgenv: %w", err)
	}
	if err := os.WriteFile(n.config, b, 0o600); err != nil {
		return fmt.Errorf("pgenv: %w", err)
	}
	if err := p.acct.chownAll(p.Root); err != nil {
		return fmt.Errorf("pgenv: %w", err)
	}
	return p.StartNode(n)
}

// StartNode starts the node's Patroni (again, after KillNode); Patroni
// starts its PostgreSQL.
func (p *Patroni) StartNode(n *PatroniNode) error {
	cmd := p.acct.command(context.Background(), filepath.Dir(n.config), "patroni", n.config)
	c, err := startChild(cmd, n.Log)
	if err != nil {
		return err
	}
	n.patroni = c
	return nil
}

// KillNode ends the node as the loss of its machine would: SIGKILL to its
// Patroni and to its PostgreSQL's every process at once. It returns once
// they have exited.
func (p *Patroni) KillNode(ctx context.Context, n *PatroniNode) error {
	pid, _, pidErr := readPostmasterPID(n.DataDir)
	if n.patroni.running() {
		_ = syscall.Kill(n.patroni.cmd.Process.Pid, syscall.SIGSTOP)
	}
	if pidErr == nil && postmasterAlive(pid, "") {
		if err := killServer(ctx, pid); err != nil {
			return err
		}
	}
	n.patroni.signal(syscall.SIGKILL, 10*time.Second)
	return nil
}

// Stop stops every process: the nodes' Patroni (which stop their
// PostgreSQL), then etcd.
func (p *Patroni) Stop() {
	for _, n := range p.Nodes {
		n.patroni.signal(syscall.SIGTERM, 30*time.Second)
		// A PostgreSQL left behind by a killed Patroni.
		if pid, _, err := readPostmasterPID(n.DataDir); err == nil && postmasterAlive(pid, "") {
			_ = killServer(context.Background(), pid)
		}
	}
	p.etcd.signal(syscall.SIGTERM, 10*time.Second)
}

// URL is a multi-host connection string naming every node's PostgreSQL,
// for database db, that reaches whichever takes writes.
func (p *Patroni) URL(db string) string {
	hosts := make([]string, len(p.Nodes))
	for i, n := range p.Nodes {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", n.Port)
	}
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable&target_session_attrs=read-write", Superuser, strings.Join(hosts, ","), db)
}

// NodeURL connects to the node's PostgreSQL, database db.
func (n *PatroniNode) NodeURL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", Superuser, n.Port, db)
}

// PatroniStatus is the cluster as a node's REST API describes it (GET
// /cluster).
type PatroniStatus struct {
	Members []struct {
		Name     string `json:"name"`
		Role     string `json:"role"`
		State    string `json:"state"`
		Timeline int    `json:"timeline"`
		Lag      any    `json:"lag"`
	} `json:"members"`
}

// Leader is the name of the member holding the leader key, "" for none.
func (s PatroniStatus) Leader() string {
	for _, m := range s.Members {
		if m.Role == "leader" && m.State == "running" {
			return m.Name
		}
	}
	return ""
}

// SyncStandbys counts the synchronous standbys.
func (s PatroniStatus) SyncStandbys() int {
	n := 0
	for _, m := range s.Members {
		if m.Role == "sync_standby" {
			n++
		}
	}
	return n
}

// Status asks the node's REST API for the cluster's state.
func (p *Patroni) Status(ctx context.Context, n *PatroniNode) (PatroniStatus, error) {
	var s PatroniStatus
	return s, n.get(ctx, "/cluster", &s)
}

// NodeState is a node's own view (GET /patroni): its role ("master" or
// "primary" while it leads, "replica" otherwise) and state.
type NodeState struct {
	Role     string `json:"role"`
	State    string `json:"state"`
	Timeline int    `json:"timeline"`
}

// State asks the node's REST API for its own state.
func (n *PatroniNode) State(ctx context.Context) (NodeState, error) {
	var s NodeState
	return s, n.get(ctx, "/patroni", &s)
}

// History is the cluster's timeline history (GET /history): one entry per
// promotion, [timeline, lsn, reason, timestamp, new leader].
func (n *PatroniNode) History(ctx context.Context) ([][]any, error) {
	var h [][]any
	return h, n.get(ctx, "/history", &h)
}

func (n *PatroniNode) get(ctx context.Context, path string, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", n.APIPort, path), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

// waitFor polls the REST API of every running node until one reports a
// status that ok accepts.
func (p *Patroni) waitFor(ctx context.Context, timeout time.Duration, ok func(PatroniStatus) bool) error {
	return pollUntil(ctx, timeout, func() error {
		var last error = errors.New("no node answers")
		for _, n := range p.Nodes {
			if !n.patroni.running() {
				continue
			}
			s, err := p.Status(ctx, n)
			if err != nil {
				last = err
				continue
			}
			if ok(s) {
				return nil
			}
			last = fmt.Errorf("cluster state %+v", s.Members)
		}
		return last
	})
}

// pollUntil calls f until it returns nil, ctx ends or timeout passes.
func pollUntil(ctx context.Context, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// patroniLogTime is how Patroni stamps its log lines (local time).
const patroniLogTime = "2006-01-02 15:04:05,000"

// LogEvent returns when the node's Patroni first logged a line holding
// substr at or after since, from the time stamp Patroni wrote on it.
func (n *PatroniNode) LogEvent(since time.Time, substr string) (time.Time, bool) {
	b, err := os.ReadFile(n.Log)
	if err != nil {
		return time.Time{}, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if len(line) < len(patroniLogTime) || !strings.Contains(line, substr) {
			continue
		}
		at, err := time.ParseInLocation(patroniLogTime, line[:len(patroniLogTime)], time.Local)
		if err == nil && !at.Before(since.Truncate(time.Millisecond)) {
			return at, true
		}
	}
	return time.Time{}, false
}
