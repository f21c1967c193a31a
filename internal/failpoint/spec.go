package failpoint

import (
	"fmt"
	"strconv"
	"strings"
)

// parse reads a failpoint specification (see the package documentation)
// into the hit each named point crashes on. It is reachable only from a
// build with the "failpoints" tag; the linker drops it from any other.
func parse(spec string) (map[string]int64, error) {
	points := map[string]int64{}
	for item := range strings.SplitSeq(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, action, ok := strings.Cut(item, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: want name=crash or name=crash@N", item)
		}
		verb, nth, hasNth := strings.Cut(action, "@")
		if verb != "crash" {
			return nil, fmt.Errorf("%q: unknown action %q (want crash or crash@N)", item, verb)
		}
		at := int64(1)
		if hasNth {
			n, err := strconv.ParseInt(nth, 10, 64)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("%q: the hit to crash on must be a positive integer", item)
			}
			at = n
		}
		points[name] = at
	}
	return points, nil
}
