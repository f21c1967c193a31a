package settlements

import "github.com/riverqueue/river"

// ApplyArgs is the job that applies a recorded settlement file
// (Service.Apply). It is inserted in the transaction that
// records the file, so it exists exactly when the file is recorded; it is
// unique per file, and a run that dies resumes from the file's cursor.
type ApplyArgs struct {
	FileID int64 `json:"file_id"`
}

// Kind is the job's kind in River.
func (ApplyArgs) Kind() string { return "settlement_apply" }

// InsertOpts makes the job unique per file; after its last attempt it ends
// discarded (River's dead letters) for an operator.
func (ApplyArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 10, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}
