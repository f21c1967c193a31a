package accounts_test

import (
	"testing"

	"github.com/atomicrides/atomicrides/internal/testkit"
)

// testBundle is one isolated world (its own database, fake Stripe, clock,
// service and accounts) with the helpers of these tests.
type testBundle struct{ *testkit.Env }

func setup(t *testing.T) *testBundle {
	t.Helper()
	return &testBundle{testkit.New(t)}
}
