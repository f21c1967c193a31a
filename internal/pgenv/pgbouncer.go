package pgenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// PgBouncerOptions adjust the PgBouncer that StartPgBouncer starts.
type PgBouncerOptions struct {
	// Port is the port to ask for first; when it is taken, any free port
	// is used.
	Port int
	// PoolSize is how many server connections PgBouncer opens per database
	// and user (default_pool_size); zero means 20.
	PoolSize int
	// MaxClientConn bounds the clients PgBouncer accepts; zero means 500.
	MaxClientConn int
	// User is the one user clients log in as (by trust), and PgBouncer
	// as on the server; empty means Superuser.
	User string
}

// PgBouncer is a PgBouncer in transaction pooling mode in front of a
// PostgreSQL server on 127.0.0.1: every database of the server is
// reachable through it under its own name. It runs as a child of the process that started it, as the
// cluster's account (PgBouncer refuses to run as root), until Stop.
type PgBouncer struct {
	// Port is PgBouncer's TCP port on 127.0.0.1.
	Port int
	// Root holds its settings, user list and log (pgbouncer.log).
	Root string
	// PoolSize is the server connections per database and user.
	PoolSize int
	// User is the user clients log in as.
	User string

	cmd  *exec.Cmd
	done chan struct{}
}

// StartPgBouncer starts PgBouncer, in transaction pooling mode, in front
// of the server on 127.0.0.1:serverPort (a Cluster's Port, say), its
// files in dir (which must not be shared with a cluster), and returns once
// it accepts connections to the server's "postgres" database. Clients
// authenticate by trust as opts.User; PgBouncer connects to the server as
// that user, which the server must let in without a password.
func StartPgBouncer(ctx context.Context, dir string, serverPort int, opts PgBouncerOptions) (*PgBouncer, error) {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		return nil, fmt.Errorf("pgenv: pgbouncer not found on PATH (Debian: apt-get install pgbouncer): %w", err)
	}
	acct, err := clusterAccount()
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("pgenv: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pgenv: %w", err)
	}
	root, err := chooseRoot(ctx, dir, nil, acct)
	if err != nil {
		return nil, err
	}
	b := &PgBouncer{Root: root, PoolSize: opts.PoolSize, User: opts.User}
	if b.User == "" {
		b.User = Superuser
	}
	if b.PoolSize == 0 {
		b.PoolSize = 20
	}
	maxClients := opts.MaxClientConn
	if maxClients == 0 {
		maxClients = 500
	}
	tried := map[int]bool{}
	for attempt := 1; ; attempt++ {
		port, err := freePort([]int{opts.Port}, tried)
		if err != nil {
			return nil, err
		}
		tried[port] = true
		b.Port = port
		if err := b.writeConf(acct, serverPort, maxClients); err != nil {
			return nil, err
		}
		logPath := filepath.Join(root, "pgbouncer.log")
		logStart := fileSize(logPath)
		err = b.start(acct, bin)
		if err == nil {
			err = waitReady(ctx, b.URL("postgres"), readyTimeout)
		}
		if err == nil {
			return b, nil
		}
		b.Stop()
		log := readFrom(logPath, logStart)
		if attempt < 5 && strings.Contains(log, "Address already in use") {
			continue // another process took the port: try another
		}
		return nil, fmt.Errorf("pgenv: pgbouncer (as %s) on port %d: %w\n%s says:\n%s", acct, port, err, logPath, lastLines(log, 30))
	}
}

// URL connects to the database db through PgBouncer, as its user.
func (b *PgBouncer) URL(db string) string {
	return (&url.URL{Scheme: "postgres", User: url.User(b.User), Host: fmt.Sprintf("127.0.0.1:%d", b.Port), Path: "/" + db, RawQuery: "sslmode=disable"}).String()
}

// Stop ends PgBouncer at once (SIGTERM: client connections are closed) and
// waits until it has exited. Stopping a stopped PgBouncer does nothing.
func (b *PgBouncer) Stop() {
	if b.cmd == nil || b.cmd.Process == nil {
		return
	}
	select {
	case <-b.done:
		return
	default:
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
}

func (b *PgBouncer) start(acct *account, bin string) error {
	logFile, err := os.OpenFile(filepath.Join(b.Root, "pgbouncer.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("pgenv: %w", err)
	}
	defer logFile.Close()
	// Not bound to a context: PgBouncer lives until Stop.
	b.cmd = acct.command(context.Background(), b.Root, bin, filepath.Join(b.Root, "pgbouncer.ini"))
	b.cmd.Stdout, b.cmd.Stderr = logFile, logFile
	if err := b.cmd.Start(); err != nil {
		return fmt.Errorf("pgenv: start pgbouncer: %w", err)
	}
	b.done = make(chan struct{})
	go func() {
		_ = b.cmd.Wait()
		close(b.done)
	}()
	return nil
}

// writeConf writes pgbouncer.ini and the user list: every database of the
// server on serverPort, transaction pooling, trust for the user, on
// 127.0.0.1 only; PgBouncer's own console (database pgbouncer) lets the
// user in as an administrator.
func (b *PgBouncer) writeConf(acct *account, serverPort, maxClients int) error {
	users := filepath.Join(b.Root, "userlist.txt")
	conf := fmt.Sprintf(`; Written by pgenv at every start; edits are lost.
[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
pool_mode = transaction
default_pool_size = %d
max_client_conn = %d
; pgx may send it; PgBouncer would refuse the client for an unknown one.
ignore_startup_parameters = extra_float_digits
server_login_retry = 1
log_connections = 0
log_disconnections = 0
`, serverPort, b.Port, users, b.User, b.PoolSize, maxClients)
	err := errors.Join(
		os.WriteFile(filepath.Join(b.Root, "pgbouncer.ini"), []byte(conf), 0o600),
		os.WriteFile(users, []byte(fmt.Sprintf("%q \"\"\n", b.User)), 0o600),
	)
	if err != nil {
		return fmt.Errorf("pgenv: %w", err)
	}
	return acct.chownAll(b.Root)
}
