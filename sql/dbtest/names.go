package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

const (
	// testDBPrefix starts the name of every test database:
	// atomicrides_test_<unix seconds>_<random>.
	testDBPrefix = "atomicrides_test_"
	// staleAfter is the age past which a test database is taken to be left
	// by a killed test process (its cleanup never ran) and dropped.
	staleAfter = 24 * time.Hour
)

// newDatabaseName returns a fresh test database name that records now.
func newDatabaseName(now time.Time) string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails
	return testDBPrefix + strconv.FormatInt(now.Unix(), 10) + "_" + hex.EncodeToString(b[:])
}

// createdAt reads the creation time recorded in a test database's name.
func createdAt(name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(name, testDBPrefix)
	if !ok {
		return time.Time{}, false
	}
	secs, _, ok := strings.Cut(rest, "_")
	if !ok {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(n, 0), true
}

// dropStale drops, best effort, the test databases older than staleAfter.
func (s *server) dropStale(ctx context.Context, now time.Time) {
	rows, err := s.admin.Query(ctx, "SELECT datname FROM pg_database WHERE starts_with(datname, $1)", testDBPrefix)
	if err != nil {
		return
	}
	var stale []string
	for rows.Next() {
		var name string
		if rows.Scan(&name) == nil {
			if at, ok := createdAt(name); ok && now.Sub(at) > staleAfter {
				stale = append(stale, name)
			}
		}
	}
	rows.Close()
	for _, name := range stale {
		_ = s.dropDatabase(ctx, name)
	}
}
