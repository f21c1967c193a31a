package pgenv

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPatroniFailover: Patroni on etcd runs a leader and a synchronous
// standby; when the leader's Patroni and PostgreSQL are SIGKILLed, Patroni
// promotes the standby by itself, and every commit the leader acknowledged
// is on it.
func TestPatroniFailover(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir, err := os.MkdirTemp("", "pgenv-patroni-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	p, err := StartPatroni(ctx, dir, PatroniOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		p.Stop()
		if !t.Failed() {
			_ = os.RemoveAll(p.Root)
			_ = os.RemoveAll(dir)
		}
	})
	s, err := p.Status(ctx, p.Nodes[0])
	require.NoError(t, err)
	require.Equal(t, "node0", s.Leader())
	require.Equal(t, 1, s.SyncStandbys())
	require.Equal(t, "on", queryOne(t, p.Nodes[0].NodeURL("postgres"), "SHOW synchronous_commit"))

	url := p.URL("postgres")
	execSQL(t, url, "CREATE TABLE kept (x int); INSERT INTO kept SELECT generate_series(1, 100)")
	require.NoError(t, p.KillNode(ctx, p.Nodes[0]))
	killed := time.Now()
	require.NoError(t, pollUntil(ctx, time.Minute, func() error {
		st, err := p.Nodes[1].State(ctx)
		if err == nil && (st.Role != "master" && st.Role != "primary" || st.State != "running") {
			err = os.ErrNotExist
		}
		return err
	}))
	t.Logf("node1 promoted by Patroni %s after the kill", time.Since(killed).Round(time.Millisecond))
	require.Equal(t, "100", queryOne(t, url, "SELECT count(*)::text FROM kept"))
	execSQL(t, url, "INSERT INTO kept VALUES (101)")
	// Patroni records the promotion in its history once the new
	// timeline's checkpoint is done.
	require.NoError(t, pollUntil(ctx, 30*time.Second, func() error {
		h, err := p.Nodes[1].History(ctx)
		if err == nil && len(h) == 0 {
			err = os.ErrNotExist
		}
		return err
	}))
}
