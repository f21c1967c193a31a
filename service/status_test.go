package service_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/service"
)

// TestStatusEnums keeps the enums the spec publishes in step with the
// domain's status constants.
func TestStatusEnums(t *testing.T) {
	t.Parallel()
	enum := func(v any, field string) string {
		f, ok := reflect.TypeOf(v).FieldByName(field)
		require.True(t, ok, field)
		return f.Tag.Get("enum")
	}
	join := func(values ...string) string { return strings.Join(values, ",") }

	require.Equal(t, join(string(service.RideChargePending), string(service.RideChargeRequiresAction), string(service.RideChargeCharged),
		string(service.RideChargeDeclined), string(service.RideChargeExpired),
		string(service.RideChargeAuthorized), string(service.RideChargeCapturing), string(service.RideChargeCompleted),
		string(service.RideChargeCaptureFailed), string(service.RideChargeCancelling), string(service.RideChargeCancelled)),
		enum(service.Ride{}, "ChargeStatus"))
	require.Equal(t, join(string(service.CaptureBooking), string(service.CaptureTrip)), enum(service.Trip{}, "Capture"))
	require.Equal(t, join(service.ExtraNone, service.ExtraCharged, service.ExtraDue, service.ExtraPaid), enum(service.Trip{}, "ExtraStatus"))
	require.Equal(t, join(string(service.RideRefundNone), string(service.RideRefundPending), string(service.RideRefundRefunded), string(service.RideRefundFailed)),
		enum(service.Ride{}, "RefundStatus"))
	require.Equal(t, string(service.RideRefundRefunded), enum(service.RideRefundResult{}, "Status"))
}
