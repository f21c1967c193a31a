package settlements

// SetAfterBatch makes s call f after each committed batch of a settlement
// file, so that a test can stop a run between batches.
func SetAfterBatch(s *Service, f func(fileID int64, cursor int)) { s.afterBatch = f }
