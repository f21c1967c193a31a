package service

import (
	"context"
	"fmt"
)

// ResumeStored drives the stored request of the key with id keyID through the
// flow its row names, from the key row and the database alone: the way a
// request is completed by something other than its client.
func (s *Service) ResumeStored(ctx context.Context, keyID int64) (*Response, error) {
	row, err := s.queries.IdempotencyKeyGetByID(ctx, s.pool, keyID)
	if err != nil {
		return nil, err
	}
	runner, ok := s.flows[row.Flow]
	if !ok {
		return nil, fmt.Errorf("key %d: no flow %q", keyID, row.Flow)
	}
	return runner(ctx, s, row)
}
