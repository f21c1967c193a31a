package bench

import (
	"fmt"
	"strings"
)

// namedRun is one measured run of the load generator, named for the report.
type namedRun struct {
	Name string
	Run  loadRun
}

// capacityRuns are the runs of p in which every request is expected to
// succeed on its first attempt: each ride under a key of its own, each
// replay of a finished key, each GET /healthz, each trip's booking and
// completion. Runs that refuse requests by
// design (admission, shedding) are not among them.
func (p *benchPoint) capacityRuns() []namedRun {
	return []namedRun{
		{"new rides", p.New},
		{"new rides through PgBouncer", p.Pooled},
		{"replays", p.Replay},
		{"first replays", p.FirstReplay},
		{"GET /healthz", p.Healthz},
		{"new rides with Stripe latency", p.Slow},
		{"trips", p.Trip},
	}
}

// capacityRuns are the grown tables' runs, as benchPoint.capacityRuns.
func (g *growthRun) capacityRuns() []namedRun {
	if g == nil {
		return nil
	}
	return []namedRun{
		{"new rides on grown tables", g.New},
		{"first replays on grown tables", g.FirstReplay},
		{"new rides during a reaper pass", g.Reaping},
	}
}

// cleanRunsTarget judges "no error, no 409 in any run": every capacity run
// of the sweep and of the grown tables answered every request as wanted.
// Judged once at least one run was measured.
func cleanRunsTarget(points []*benchPoint, growth *growthRun) benchTarget {
	t := benchTarget{Name: "no error, no 409 in any run"}
	type labelled struct {
		label string
		run   loadRun
	}
	var runs []labelled
	for _, p := range points {
		for _, r := range p.capacityRuns() {
			runs = append(runs, labelled{fmt.Sprintf("%s at %d clients", r.Name, p.Clients), r.Run})
		}
	}
	for _, r := range growth.capacityRuns() {
		runs = append(runs, labelled{fmt.Sprintf("%s at %d clients", r.Name, r.Run.Clients), r.Run})
	}
	var measured, conflicts, errors int
	var bad []string
	for _, r := range runs {
		if r.run.Requests == 0 {
			continue
		}
		measured++
		conflicts += r.run.Conflicts
		errors += r.run.Errors
		if r.run.Conflicts > 0 || r.run.Errors > 0 {
			bad = append(bad, fmt.Sprintf("%s: %d × 409, %d other errors", r.label, r.run.Conflicts, r.run.Errors))
		}
	}
	if measured == 0 {
		return t
	}
	t.Judged, t.Met = true, len(bad) == 0
	t.Got = fmt.Sprintf("%d × 409, %d other errors in %d runs", conflicts, errors, measured)
	if len(bad) > 0 {
		t.Got += " (" + strings.Join(bad, "; ") + ")"
	}
	return t
}
