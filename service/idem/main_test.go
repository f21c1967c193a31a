package idem_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/atomicrides/atomicrides/sql/dbtest"
)

// examplePool is the database of the examples, which have no testing.T.
var examplePool *pgxpool.Pool

func TestMain(m *testing.M) {
	pool, closeDB, err := dbtest.Open()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	examplePool = pool
	code := m.Run()
	closeDB()
	os.Exit(code)
}

// newOwner inserts a key owner (the engine's keys belong to a row of
// users) and returns its id.
func newOwner(ctx context.Context, pool *pgxpool.Pool, email string) (int64, error) {
	var id int64
	err := pool.QueryRow(ctx, `INSERT INTO users (email, payment_source) VALUES ($1, 'none') RETURNING id`, email).Scan(&id)
	return id, err
}

// issuer stands for a foreign service that honours idempotency keys, as a
// payment processor does: a request under a key it saw answers what the
// first one did, and issued counts the cards it really issued.
type issuer struct {
	mu     sync.Mutex
	cards  map[string]string
	issued int
}

func newIssuer() *issuer { return &issuer{cards: map[string]string{}} }

// Issue issues a gift card of cents under the idempotency key key.
func (is *issuer) Issue(key string, cents int64) string {
	is.mu.Lock()
	defer is.mu.Unlock()
	if card, ok := is.cards[key]; ok {
		return card
	}
	is.issued++
	card := fmt.Sprintf("card_%d_%d", is.issued, cents)
	is.cards[key] = card
	return card
}

// Issued is how many cards were really issued.
func (is *issuer) Issued() int {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.issued
}
