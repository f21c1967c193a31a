package openapi

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRequestTimeoutIsSecondsWithinBounds(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]time.Duration{"5": 5 * time.Second, "0.5": 500 * time.Millisecond, " 300 ": 5 * time.Minute} {
		got, ok := requestTimeout(v)
		require.True(t, ok, v)
		require.Equal(t, want, got, v)
	}
	for _, v := range []string{"", "0", "-1", "301", "NaN", "Inf", "5s", "soon"} {
		_, ok := requestTimeout(v)
		require.False(t, ok, "%q is no Request-Timeout", v)
	}
}
