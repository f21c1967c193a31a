package failpoint

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	t.Parallel()
	got, err := parse(" ride.create:started:after_commit=crash, ride.refund:refund_created:after_call=crash@3 ,")
	require.NoError(t, err)
	require.Equal(t, map[string]int64{
		"ride.create:started:after_commit":      1,
		"ride.refund:refund_created:after_call": 3,
	}, got)

	got, err = parse("")
	require.NoError(t, err)
	require.Empty(t, got)

	for _, bad := range []string{"ride.create:started:after_commit", "=crash", "x=panic", "x=crash@0", "x=crash@two"} {
		_, err := parse(bad)
		require.Error(t, err, bad)
	}
}
