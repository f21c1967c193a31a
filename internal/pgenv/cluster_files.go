package pgenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// confFileName is the settings file pgenv owns inside PGDATA; it is rewritten
// at every start and included from postgresql.conf.
const confFileName = "pgenv.conf"

// maxSocketPath is the longest unix socket path (sun_path less its NUL) that
// every Unix accepts.
const maxSocketPath = 103

// chooseRoot picks the directory for the cluster's files: the one recorded
// before, else dir/cluster, else (when the PostgreSQL account cannot reach
// dir) a directory under the temp dir named after dir, so that every process
// of one project finds the same one.
func chooseRoot(ctx context.Context, dir string, st *clusterState, acct *account) (string, error) {
	sum := sha256.Sum256([]byte(dir))
	name := "pgenv-" + hex.EncodeToString(sum[:])[:12]
	candidates := []string{filepath.Join(dir, "cluster")}
	for _, tmp := range []string{os.TempDir(), "/tmp"} {
		if c := filepath.Join(tmp, name); c != candidates[len(candidates)-1] {
			candidates = append(candidates, c)
		}
	}
	if st != nil && st.Root != "" {
		candidates = append([]string{st.Root}, candidates...)
	}
	var tried []string
	for _, root := range candidates {
		if err := prepareRoot(ctx, root, acct); err != nil {
			tried = append(tried, err.Error())
			continue
		}
		return root, nil
	}
	return "", fmt.Errorf("pgenv: no directory for the cluster is usable by %s:\n  %s", acct, strings.Join(tried, "\n  "))
}

// prepareRoot makes root (if missing) and checks that it is a real directory
// owned by the account, which can reach and write it.
func prepareRoot(ctx context.Context, root string, acct *account) error {
	created := false
	fi, err := os.Lstat(root)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.Mkdir(root, 0o700); err != nil {
			return fmt.Errorf("%s: %w", root, err)
		}
		if err := acct.chownAll(root); err != nil {
			_ = os.Remove(root)
			return fmt.Errorf("%s: %w", root, err)
		}
		created = true
	case err != nil:
		return fmt.Errorf("%s: %w", root, err)
	case !fi.IsDir():
		return fmt.Errorf("%s: not a directory", root)
	case !acct.owns(fi):
		return fmt.Errorf("%s: not owned by %s", root, acct)
	}
	if !acct.canUse(ctx, root) {
		if created {
			_ = os.Remove(root)
		}
		return fmt.Errorf("%s: %s cannot reach or write it (a parent directory is not traversable)", root, acct)
	}
	return nil
}

// initialise runs initdb unless DataDir already holds a cluster of the
// installed major version. initdb writes to a scratch directory renamed into
// place at the end, so a DataDir that exists is always complete.
func (c *Cluster) initialise(ctx context.Context) error {
	major, err := serverMajor(c.binDir)
	if err != nil {
		return err
	}
	if b, err := os.ReadFile(filepath.Join(c.DataDir, "PG_VERSION")); err == nil {
		if strings.TrimSpace(string(b)) == major {
			return nil
		}
		// Another major version's data: the cluster is throwaway, so
		// start afresh rather than ask for pg_upgrade.
	}
	if err := os.RemoveAll(c.DataDir); err != nil {
		return fmt.Errorf("pgenv: remove stale %s: %w", c.DataDir, err)
	}
	scratch := c.DataDir + ".init"
	if err := os.RemoveAll(scratch); err != nil {
		return fmt.Errorf("pgenv: remove stale %s: %w", scratch, err)
	}
	out, err := c.acct.command(ctx, c.Root, filepath.Join(c.binDir, "initdb"),
		"-D", scratch, "-U", Superuser, "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync",
	).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgenv: initdb (as %s) in %s: %w\n%s", c.acct, scratch, err, out)
	}
	f, err := os.OpenFile(filepath.Join(scratch, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgenv: %w", err)
	}
	_, werr := fmt.Fprintf(f, "\n# Settings of pgenv's throwaway cluster, rewritten at every start.\ninclude_if_exists = '%s'\n", confFileName)
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("pgenv: %w", err)
	}
	if err := os.Rename(scratch, c.DataDir); err != nil {
		return fmt.Errorf("pgenv: %w", err)
	}
	return nil
}

// writeConf writes the settings for a start on port: reachable only from
// this machine, fast rather than durable (unless crash-safe, and even then
// only against a crash of the server), roomy enough for many parallel test
// databases.
func (c *Cluster) writeConf(port int) error {
	sockDir := filepath.Join(c.Root, "run")
	if err := os.MkdirAll(sockDir, 0o700); err != nil {
		return fmt.Errorf("pgenv: %w", err)
	}
	if err := c.acct.chownAll(sockDir); err != nil {
		return fmt.Errorf("pgenv: %w", err)
	}
	if len(sockDir)+len("/.s.PGSQL.65535.lock") > maxSocketPath {
		sockDir = "" // too long for a socket path: TCP only
	}
	syncCommit := "off"
	if c.crashSafe {
		syncCommit = "on"
	}
	walLevel, walSenders := "minimal", 0
	if c.replication {
		walLevel, walSenders = "replica", 10
	}
	conf := fmt.Sprintf(`# Written by pgenv at every start; edits are lost.
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
max_connections = 300
shared_buffers = 64MB
fsync = off
synchronous_commit = %s
full_page_writes = off
wal_level = %s
max_wal_senders = %d
max_wal_size = 512MB
wal_buffers = 16MB
`, port, confQuote(sockDir), syncCommit, walLevel, walSenders)
	if c.replication {
		// A standby that falls behind for a while still finds the WAL it
		// needs; a commit waits for the named standby's flush.
		conf += fmt.Sprintf("wal_keep_size = 512MB\nsynchronous_standby_names = '%s'\n", confQuote(c.syncStandby))
	}
	if c.primaryConninfo != "" {
		// Read only while the server is a standby (standby.signal);
		// ignored once promoted.
		conf += fmt.Sprintf("primary_conninfo = '%s'\nhot_standby = on\n", confQuote(c.primaryConninfo))
	}
	path := filepath.Join(c.DataDir, confFileName)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("pgenv: %w", err)
	}
	return c.acct.chownAll(path)
}

// confQuote escapes s for a single-quoted postgresql.conf value.
func confQuote(s string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s)
}
