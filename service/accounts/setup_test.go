package accounts_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/service"
)

// testBundle is one isolated world (its own database, fake Stripe, clock,
// service and accounts) with the helpers of these tests.
type testBundle struct{ *testkit.Env }

func setup(t *testing.T) *testBundle {
	t.Helper()
	return &testBundle{testkit.New(t)}
}

func requireCode(t *testing.T, err error, code service.Code) *service.Error {
	t.Helper()
	require.Error(t, err)
	var e *service.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, code, e.Code, "error: %v", err)
	return e
}
