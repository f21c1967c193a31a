//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"sync/atomic"
)

// Enabled reports whether failpoints are compiled in (build tag
// "failpoints"). Guard every call with it so that the compiler drops the
// call and the making of its name.
const Enabled = true

// armed holds the points named by EnvVar when the process started; the map
// is never written afterwards.
var armed map[string]*point

// point is one armed failpoint: it crashes on its at-th hit.
type point struct {
	at   int64
	hits atomic.Int64
}

func init() {
	spec, err := parse(os.Getenv(EnvVar))
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", EnvVar, err)
		os.Exit(2)
	}
	armed = make(map[string]*point, len(spec))
	for name, at := range spec {
		armed[name] = &point{at: at}
	}
}

// Hit counts a hit of the named point and crashes the process if the point
// is armed for this hit.
func Hit(name string) {
	p := armed[name]
	if p == nil || p.hits.Add(1) != p.at {
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint %s: crash\n", name)
	self, err := os.FindProcess(os.Getpid())
	if err == nil {
		err = self.Kill() // SIGKILL on Unix
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "failpoint %s: kill: %v\n", name, err)
		os.Exit(137)
	}
	select {} // until the signal lands
}
