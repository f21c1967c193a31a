package idem

import "github.com/atomicrides/atomicrides/internal/failpoint"

// Where a build with the "failpoints" tag can crash a request on purpose:
// the failpoint "<flow>:<from>:<at>" names the boundary of the step from
// recovery point <from> ("claim" for a claim that runs no phase) of the
// flow. Tests of crash recovery arm these names (internal/failpoint).
const (
	// AtBeforeCommit: the phase's writes are done, its commit is not.
	AtBeforeCommit = "before_commit"
	// AtAfterCommit: the phase is committed; nothing after it ran.
	AtAfterCommit = "after_commit"
	// AtAfterCall: the foreign call answered; nothing recorded its answer.
	AtAfterCall = "after_call"
)

// FailpointName is the failpoint of flow's step from recovery point from
// (PhaseClaim for a claim that runs no phase), at boundary at.
func FailpointName(flow string, from RecoveryPoint, at string) string {
	return flow + ":" + string(from) + ":" + at
}

// boundary is where in a step crashPoint stands. It is a number, not the
// boundary's name: a call the compiler does not inline still passes its
// arguments, and a build without the "failpoints" tag must carry no
// failpoint name.
type boundary uint8

const (
	beforeCommit boundary = iota
	afterCommit
	afterCall
)

// name is the boundary's part of a failpoint name.
func (b boundary) name() string {
	switch b {
	case beforeCommit:
		return AtBeforeCommit
	case afterCommit:
		return AtAfterCommit
	}
	return AtAfterCall
}

// crashPoint is a failpoint of the engine. Without the "failpoints" build
// tag its body is compiled away, and the names with it.
func crashPoint(flow string, from RecoveryPoint, at boundary) {
	if failpoint.Enabled {
		failpoint.Hit(FailpointName(flow, from, at.name()))
	}
}
