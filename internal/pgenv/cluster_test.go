package pgenv

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClusterLifecycle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := clusterDir(t)

	c, err := StartCluster(ctx, dir)
	require.NoError(t, err)
	require.True(t, c.Started)
	require.Equal(t, filepath.Join(dir, "cluster"), c.Root)
	require.Equal(t, "1", queryOne(t, c.URL, "SELECT 1::text"))
	require.Equal(t, "127.0.0.1", queryOne(t, c.URL, "SHOW listen_addresses"))
	require.Equal(t, "off", queryOne(t, c.URL, "SHOW fsync"))
	maxConns, err := strconv.Atoi(queryOne(t, c.URL, "SHOW max_connections"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, maxConns, 200)
	execSQL(t, c.URL, "CREATE TABLE kept (x int)")

	st := readState(dir)
	require.NotNil(t, st)
	require.Equal(t, c.PID, st.PID)
	require.Equal(t, c.URL, st.URL)
	require.Equal(t, c.Root, st.Root)

	again, err := StartCluster(ctx, dir)
	require.NoError(t, err)
	require.False(t, again.Started, "a running cluster is reused")
	require.Equal(t, c.PID, again.PID)
	require.Equal(t, c.URL, again.URL)

	pid := c.PID
	require.NoError(t, c.Stop(ctx))
	require.False(t, postmasterAlive(pid, ""), "the postmaster is gone once Stop returns")
	require.NoFileExists(t, filepath.Join(c.DataDir, "postmaster.pid"))
	require.Zero(t, readState(dir).PID)
	require.NoError(t, StopCluster(ctx, dir), "stopping a stopped cluster is fine")
	require.Equal(t, again.Port, readState(dir).Port, "the last port is kept for the next start")

	restarted, err := StartCluster(ctx, dir)
	require.NoError(t, err)
	require.True(t, restarted.Started)
	require.NotEqual(t, pid, restarted.PID)
	require.Equal(t, "1", queryOne(t, restarted.URL, "SELECT count(*)::text FROM pg_tables WHERE tablename = 'kept'"), "data survives a restart")
	require.NoError(t, StopCluster(ctx, dir))
	require.False(t, postmasterAlive(restarted.PID, ""))
}

func TestStartClusterConcurrently(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)
	const n = 4
	clusters := make([]*Cluster, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := StartCluster(t.Context(), dir)
			assert.NoError(t, err)
			clusters[i] = c
		})
	}
	wg.Wait()
	started := 0
	for _, c := range clusters {
		require.NotNil(t, c)
		require.Equal(t, clusters[0].PID, c.PID)
		if c.Started {
			started++
		}
	}
	require.Equal(t, 1, started, "exactly one caller starts the server")
}

func TestStartClusterRelocatesWhenUnreachable(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("relocation only happens when running as root: PostgreSQL then runs as another account")
	}
	ctx := t.Context()
	dir := t.TempDir() // its parent is mode 0700, owned by root
	c, err := StartCluster(ctx, dir)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, StopCluster(context.Background(), dir))
		assert.NoError(t, os.RemoveAll(c.Root))
	})
	require.True(t, c.Started)
	require.True(t, strings.HasPrefix(c.Root, os.TempDir()+string(filepath.Separator)+"pgenv-"), c.Root)
	require.Equal(t, c.Root, readState(dir).Root, "the state file records where the cluster went")
	require.Equal(t, "1", queryOne(t, c.URL, "SELECT 1::text"))

	again, err := StartCluster(ctx, dir)
	require.NoError(t, err)
	require.False(t, again.Started)
	require.Equal(t, c.Root, again.Root)

	require.NoError(t, StopCluster(ctx, dir))
	require.False(t, postmasterAlive(c.PID, ""))
}

func TestStopClusterWithoutCluster(t *testing.T) {
	t.Parallel()
	require.NoError(t, StopCluster(t.Context(), filepath.Join(t.TempDir(), "missing")))
	require.NoError(t, StopCluster(t.Context(), t.TempDir()))
}

func TestStartClusterAfterCrash(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := clusterDir(t)
	c, err := StartCluster(ctx, dir)
	require.NoError(t, err)

	require.NoError(t, syscall.Kill(c.PID, syscall.SIGKILL))
	require.Eventually(t, func() bool { return !postmasterAlive(c.PID, "") }, 10*time.Second, 10*time.Millisecond)
	_, err = os.Stat(filepath.Join(c.DataDir, "postmaster.pid"))
	require.NoError(t, err, "a killed postmaster leaves its pid file behind")

	again, err := StartCluster(ctx, dir)
	require.NoError(t, err)
	require.True(t, again.Started)
	require.NotEqual(t, c.PID, again.PID)
	require.Equal(t, "1", queryOne(t, again.URL, "SELECT 1::text"))
}

func TestRestartImmediateKeepsCommittedWork(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := clusterDir(t)
	port, err := freePort(nil, map[int]bool{})
	require.NoError(t, err)
	c, err := StartClusterWith(ctx, dir, ClusterOptions{Port: port, CrashSafe: true})
	require.NoError(t, err)
	require.Equal(t, port, c.Port)
	require.Equal(t, "on", queryOne(t, c.URL, "SHOW synchronous_commit"))
	execSQL(t, c.URL, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (1)")

	pid := c.PID
	require.NoError(t, c.RestartImmediate(ctx))
	require.NotEqual(t, pid, c.PID)
	require.False(t, postmasterAlive(pid, ""))
	require.Equal(t, port, c.Port, "the server comes back on its port")
	require.Equal(t, c.PID, readState(dir).PID)
	require.Equal(t, "1", queryOne(t, c.URL, "SELECT count(*)::text FROM kept"), "a committed row survives the crash")
	require.Contains(t, readFrom(filepath.Join(c.Root, logName), 0), "database system was interrupted",
		"the server recovered from its WAL")
}
