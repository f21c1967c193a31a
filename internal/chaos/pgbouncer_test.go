package chaos

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestChaosPgBouncerShort: the two serve processes reach PostgreSQL
// through PgBouncer in transaction pooling mode (DATABASE_POOLER=pgbouncer,
// River's and the revocations' listeners on DATABASE_DIRECT_URL), and
// PostgreSQL crashes and restarts behind it under load. Part of `go tool
// task test`.
func TestChaosPgBouncerShort(t *testing.T) {
	runFailover(t, failoverPlan{
		name: "short: through PgBouncer (transaction pooling), PostgreSQL restarted behind it", logs: "pgbouncer", db: chaosDBPgBouncer,
		users: 5, clients: 8, before: 5 * time.Second, after: 5 * time.Second,
		settle: 60 * time.Second, bound: 3 * time.Minute,
	})
}

// TestChaosPgBouncer is the PgBouncer run with more load: `go tool task
// chaos` runs it.
func TestChaosPgBouncer(t *testing.T) {
	if !*chaosFullFlag {
		t.Skip("the full PgBouncer run needs -chaos.full (go tool task chaos); TestChaosPgBouncerShort is its short form")
	}
	runFailover(t, failoverPlan{
		name: "full: through PgBouncer (transaction pooling), PostgreSQL restarted behind it", logs: "pgbouncer", db: chaosDBPgBouncer,
		users: 10, clients: 12, before: 30 * time.Second, after: 30 * time.Second,
		settle: 80 * time.Second, bound: 5 * time.Minute,
	})
}

// checkThroughBouncer: the serve processes' transactions went through
// PgBouncer: its own statistics (SHOW STATS, on its admin console) count
// more transactions on the chaos database than there are idempotency
// keys, each of which took several.
func checkThroughBouncer(ctx context.Context, sys *chaosSystem, keys int) chaosCheck {
	xacts, err := bouncerXacts(ctx, sys.bouncer.URL("pgbouncer")+"&default_query_exec_mode=simple_protocol", "chaos")
	actual := fmt.Sprintf("%d transactions for %d keys", xacts, keys)
	if err != nil {
		actual = err.Error()
	}
	return chaosCheck{id: "through_pgbouncer", name: "the serve processes' transactions went through PgBouncer (its SHOW STATS)",
		expected: "more transactions than keys", actual: actual, ok: err == nil && keys > 0 && xacts > int64(keys)}
}

// bouncerXacts reads total_xact_count of database db from PgBouncer's
// admin console at url.
func bouncerXacts(ctx context.Context, url, db string) (int64, error) {
	var total int64 = -1
	err := withConn(ctx, url, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, "SHOW STATS")
		if err != nil {
			return err
		}
		defer rows.Close()
		col := map[string]int{}
		for i, f := range rows.FieldDescriptions() {
			col[f.Name] = i
		}
		for rows.Next() {
			// The simple protocol's values are text.
			vals := rows.RawValues()
			if string(vals[col["database"]]) == db {
				var err error
				total, err = strconv.ParseInt(string(vals[col["total_xact_count"]]), 10, 64)
				if err != nil {
					return err
				}
			}
		}
		return rows.Err()
	})
	if err == nil && total < 0 {
		err = fmt.Errorf("PgBouncer's SHOW STATS has no row for database %s", db)
	}
	return total, err
}
