package endtoend

import (
	"testing"

	"github.com/atomicrides/atomicrides/internal/binrun"
)

// TestMain builds the binary once for the suites here, and removes it when
// they end.
func TestMain(m *testing.M) { binrun.Main(m) }
