package pgenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestSynchronousStandbyFailover: a commit acknowledged by a primary with a
// synchronous standby survives the SIGKILL of the primary's every process;
// the promoted standby takes writes, and a multi-host connection string
// with target_session_attrs=read-write reaches whichever server is the
// primary.
func TestSynchronousStandbyFailover(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	primary, err := StartClusterWith(ctx, clusterDir(t), ClusterOptions{CrashSafe: true, Replication: true})
	require.NoError(t, err)
	require.Equal(t, "replica", queryOne(t, primary.URL, "SHOW wal_level"))
	execSQL(t, primary.URL, "CREATE TABLE kept (x int)")

	standby, err := StartStandby(ctx, clusterDir(t), primary, StandbyOptions{Synchronous: true})
	require.NoError(t, err)
	require.NotEqual(t, primary.Port, standby.Port)
	require.Equal(t, DefaultStandbyName, queryOne(t, primary.URL, "SHOW synchronous_standby_names"))
	require.Equal(t, "true", queryOne(t, standby.URL, "SELECT pg_is_in_recovery()::text"))

	multi := fmt.Sprintf("postgres://%s@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write",
		Superuser, primary.Port, standby.Port)
	require.Equal(t, fmt.Sprint(primary.Port), queryOne(t, multi, "SHOW port"), "the read-write server is the primary")

	// Every commit the primary acknowledged is on the standby when the
	// primary dies.
	execSQL(t, primary.URL, "INSERT INTO kept SELECT generate_series(1, 100)")
	pid := primary.PID
	require.NoError(t, primary.Kill(ctx))
	require.False(t, postmasterAlive(pid, ""))
	require.Empty(t, childPIDs(pid), "no process of the killed server is left")

	require.NoError(t, standby.Promote(ctx))
	require.Equal(t, "false", queryOne(t, standby.URL, "SELECT pg_is_in_recovery()::text"))
	require.Equal(t, "100", queryOne(t, standby.URL, "SELECT count(*)::text FROM kept"), "no acknowledged commit is lost")
	execSQL(t, standby.URL, "INSERT INTO kept VALUES (101)")
	require.Equal(t, fmt.Sprint(standby.Port), queryOne(t, multi, "SHOW port"), "the multi-host URL reaches the new primary")
}

// TestAsynchronousStandbyStreams: without Synchronous, the standby streams
// and the primary does not wait for it.
func TestAsynchronousStandbyStreams(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	primary, err := StartClusterWith(ctx, clusterDir(t), ClusterOptions{CrashSafe: true, Replication: true})
	require.NoError(t, err)
	standby, err := StartStandby(ctx, clusterDir(t), primary, StandbyOptions{Name: "async_one"})
	require.NoError(t, err)
	require.Equal(t, "", queryOne(t, primary.URL, "SHOW synchronous_standby_names"))
	state, err := replicationState(ctx, primary.URL, "async_one")
	require.NoError(t, err)
	require.Equal(t, "streaming async", state)

	execSQL(t, primary.URL, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (1)")
	require.Eventually(t, func() bool {
		return tryQueryOne(ctx, standby.URL, "SELECT count(*)::text FROM kept") == "1"
	}, 30*time.Second, 20*time.Millisecond, "the standby receives the commit")
}

// TestBaseBackupRestoreLosesLaterCommits: a cluster started from a base
// backup holds what was committed before the backup, and nothing
// committed after it.
func TestBaseBackupRestoreLosesLaterCommits(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	primary, err := StartClusterWith(ctx, clusterDir(t), ClusterOptions{CrashSafe: true, Replication: true})
	require.NoError(t, err)
	execSQL(t, primary.URL, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (1)")

	dir := clusterDir(t)
	backup, err := primary.BaseBackup(ctx, dir)
	require.NoError(t, err)
	require.Zero(t, backup.PID, "a backup is not started")
	execSQL(t, primary.URL, "INSERT INTO kept VALUES (2)")
	require.NoError(t, primary.Kill(ctx))

	restored, err := StartClusterWith(ctx, dir, ClusterOptions{CrashSafe: true})
	require.NoError(t, err)
	require.True(t, restored.Started)
	require.Equal(t, "1", queryOne(t, restored.URL, "SELECT string_agg(x::text, ',') FROM kept"),
		"the restore has the commit before the backup, not the one after")

	_, err = primary.BaseBackup(ctx, dir)
	require.Error(t, err, "a backup never overwrites a cluster")
}

// tryQueryOne is queryOne that returns "" on any error, for polling.
func tryQueryOne(ctx context.Context, url, query string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return ""
	}
	defer conn.Close(context.Background())
	var out string
	if conn.QueryRow(ctx, query).Scan(&out) != nil {
		return ""
	}
	return out
}
