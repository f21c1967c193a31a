package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/service/idem"
)

// KeyInfo is an idempotency key as an operator sees it.
type KeyInfo struct {
	ID             int64           `json:"id"`
	UserID         int64           `json:"user_id"`
	IdempotencyKey string          `json:"idempotency_key"`
	Flow           string          `json:"flow"`
	Method         string          `json:"method"`
	Path           string          `json:"path"`
	Params         json.RawMessage `json:"params"`
	RecoveryPoint  RecoveryPoint   `json:"recovery_point"`
	CreatedAt      time.Time       `json:"created_at"`
	LastRunAt      time.Time       `json:"last_run_at"`
	// LeasedUntil is when the current lease expires, if one is held.
	LeasedUntil *time.Time `json:"leased_until,omitempty"`
	// ResponseCode is the stored status of a finished key.
	ResponseCode *int `json:"response_code,omitempty"`
	// Completion is the latest completion job of the key, if any.
	Completion *KeyCompletionJob `json:"completion,omitempty"`
	// Attempts are the processors the request was routed to, in order
	// (KeyGet only).
	Attempts []KeyAttempt `json:"attempts,omitempty"`
	// Ride is the ride a booking's key made, or the ride a completion,
	// cancellation, balance or refund is about, as it is now (KeyGet only).
	Ride *KeyRide `json:"ride,omitempty"`
}

// KeyRide is the ride of a booking's key as an operator sees it: its
// charge status and, while it waits for its rider, until when and the job
// that ends the wait.
type KeyRide struct {
	ID           int64            `json:"id"`
	ChargeStatus RideChargeStatus `json:"charge_status"`
	// WaitsUntil is the deadline of a ride waiting for its rider.
	WaitsUntil *time.Time `json:"waits_until,omitempty"`
	// Expiry is the job that ends the wait at WaitsUntil.
	Expiry *KeyCompletionJob `json:"expiry,omitempty"`
}

// KeyCompletionJob is a completion job as an operator sees it.
type KeyCompletionJob struct {
	JobID       int64              `json:"job_id"`
	State       rivertype.JobState `json:"state"`
	Attempt     int                `json:"attempt"`
	MaxAttempts int                `json:"max_attempts"`
	// LastError is the error of the latest failed attempt.
	LastError string `json:"last_error,omitempty"`
}

// Dead reports whether the completion was discarded after its last attempt.
func (j *KeyCompletionJob) Dead() bool { return j != nil && j.State == rivertype.JobStateDiscarded }

// keyInfo is row as an operator sees it at now, by the database's clock.
func (s *Service) keyInfo(row *dbgen.IdempotencyKey, now time.Time) *KeyInfo {
	k := &KeyInfo{
		ID:             row.ID,
		UserID:         row.UserID,
		IdempotencyKey: row.IdempotencyKey,
		Flow:           row.Flow,
		Method:         row.RequestMethod,
		Path:           row.RequestPath,
		Params:         row.RequestParams,
		RecoveryPoint:  RecoveryPoint(row.RecoveryPoint),
		CreatedAt:      row.CreatedAt.UTC(),
		LastRunAt:      row.LastRunAt.UTC(),
	}
	if row.LockedAt != nil {
		until := row.LockedAt.Add(s.lease).UTC()
		if until.After(now) {
			k.LeasedUntil = &until
		}
	}
	if row.ResponseCode != nil {
		code := int(*row.ResponseCode)
		k.ResponseCode = &code
	}
	return k
}

// KeysAbandonedEnqueue is the completer's sweep: in one transaction it finds
// up to limit abandoned requests (unfinished, no live lease, idle for
// Config.AbandonedAfter) and inserts one completion job per key. Keys with a
// completion in flight or discarded are skipped by the job's uniqueness. It
// returns how many jobs were inserted.
func (s *Service) KeysAbandonedEnqueue(ctx context.Context, limit int) (int, error) {
	inserted := 0
	err := s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		inserted = 0
		ids, err := s.engine.Abandoned(ctx, tx, s.abandonedAfter, limit)
		if err != nil || len(ids) == 0 {
			return err
		}
		params := make([]river.InsertManyParams, len(ids))
		for i, id := range ids {
			params[i] = river.InsertManyParams{Args: KeyCompleteArgs{KeyID: id}}
		}
		res, err := s.jobs.InsertManyTx(ctx, tx, params)
		if err != nil {
			return err
		}
		for _, r := range res {
			if !r.UniqueSkippedAsDuplicate {
				inserted++
			}
		}
		return nil
	})
	if err != nil {
		return 0, Internal(err)
	}
	s.metrics.completerQueued.Add(float64(inserted))
	s.metrics.ops.completerLastRun.SetToCurrentTime()
	return inserted, nil
}

// KeyComplete drives the request of an unfinished key to completion through
// the same flow code as its HTTP request, from its recovery point, with the
// request as first stored. It returns the stored response; for a key that
// was already finished, the replay. Like the HTTP request it never touches a
// key under a live lease (CodeKeyInUse), and a processor outage leaves the
// key where it was (CodeProcessorUnavailable).
func (s *Service) KeyComplete(ctx context.Context, keyID int64) (resp *Response, err error) {
	outcome := "error"
	defer func() { s.metrics.completions.WithLabelValues(outcome).Inc() }()

	resp, err = s.engine.Complete(ctx, keyID)
	if errors.Is(err, idem.ErrKeyNotFound) {
		outcome = "not_found"
		return nil, &Error{Code: CodeNotFound, Message: fmt.Sprintf("no idempotency key %d", keyID)}
	}
	err = engineError(err)
	switch {
	case err == nil && resp.Replayed:
		outcome = "already_finished"
	case err == nil:
		outcome = "finished"
	case ErrorCode(err) == CodeKeyInUse:
		outcome = "in_use"
	case ErrorCode(err) == CodeProcessorUnavailable:
		outcome = "unavailable"
	}
	return resp, err
}

// ReapResult is what one reaper pass did.
type ReapResult struct {
	// Deleted counts finished keys deleted.
	Deleted int64
	// UnfinishedPastRetention counts unfinished keys older than the
	// retention: they are never deleted, and an operator must look at them.
	UnfinishedPastRetention int64
}

// KeysReap deletes finished keys created more than Config.KeyRetention ago
// by the database's clock, in batches of batch keys, each batch its own short transaction. Rides and
// audit records stay; their reference to the key becomes null.
func (s *Service) KeysReap(ctx context.Context, batch int) (ReapResult, error) {
	var res ReapResult
	deleted, n, err := s.engine.Reap(ctx, s.retention, batch, func(n int64) { s.metrics.reaped.Add(float64(n)) })
	res.Deleted = deleted
	if err != nil {
		return res, Internal(err)
	}
	res.UnfinishedPastRetention = n
	s.metrics.pastHorizon.Set(float64(n))
	s.metrics.ops.reaperLastRun.SetToCurrentTime()
	if n > 0 {
		s.logger.WarnContext(ctx, "unfinished idempotency keys past retention: list them with 'keys list'", "count", n)
	}
	return res, nil
}

// KeysStuck lists up to limit unfinished keys an operator should know of:
// idle for Config.AbandonedAfter, or older than the retention. Each carries
// its latest completion job.
func (s *Service) KeysStuck(ctx context.Context, limit int) ([]*KeyInfo, error) {
	rows, err := s.queries.IdempotencyKeyList(ctx, s.pool, dbgen.IdempotencyKeyListParams{
		IdleSeconds:      s.abandonedAfter.Seconds(),
		RetentionSeconds: s.retention.Seconds(),
		MaxKeys:          int32(limit),
	})
	if err != nil {
		return nil, Internal(err)
	}
	now, err := s.queries.ClockNow(ctx, s.pool)
	if err != nil {
		return nil, Internal(err)
	}
	keys := make([]*KeyInfo, len(rows))
	for i, row := range rows {
		keys[i] = s.keyInfo(row, now)
	}
	return keys, s.attachCompletions(ctx, keys)
}

// KeysDead lists unfinished keys among the latest limit completions
// discarded after their last attempt. They stay unfinished until an operator completes them
// (KeyComplete, or a retry of the job in River UI) or deletes the job.
func (s *Service) KeysDead(ctx context.Context, limit int) ([]*KeyInfo, error) {
	res, err := s.jobs.JobList(ctx, river.NewJobListParams().
		Kinds(KeyCompleteArgs{}.Kind()).States(rivertype.JobStateDiscarded).First(limit))
	if err != nil {
		return nil, Internal(err)
	}
	jobsByKey := make(map[int64]*rivertype.JobRow, len(res.Jobs))
	ids := make([]int64, 0, len(res.Jobs))
	for _, job := range res.Jobs {
		keyID, err := completionKeyID(job)
		if err != nil {
			return nil, err
		}
		if _, dup := jobsByKey[keyID]; !dup {
			ids = append(ids, keyID)
		}
		jobsByKey[keyID] = job
	}
	rows, err := s.queries.IdempotencyKeyListByIDs(ctx, s.pool, ids)
	if err != nil {
		return nil, Internal(err)
	}
	now, err := s.queries.ClockNow(ctx, s.pool)
	if err != nil {
		return nil, Internal(err)
	}
	var keys []*KeyInfo
	for _, row := range rows {
		if RecoveryPoint(row.RecoveryPoint) == RecoveryPointFinished {
			continue // finished since, by its client or an operator
		}
		k := s.keyInfo(row, now)
		k.Completion = completionJob(jobsByKey[row.ID])
		keys = append(keys, k)
	}
	return keys, nil
}

// KeyGet returns one key with its latest completion job.
func (s *Service) KeyGet(ctx context.Context, keyID int64) (*KeyInfo, error) {
	row, err := s.queries.IdempotencyKeyGetByID(ctx, s.pool, keyID)
	if IsNoRows(err) {
		return nil, &Error{Code: CodeNotFound, Message: fmt.Sprintf("no idempotency key %d", keyID)}
	} else if err != nil {
		return nil, Internal(err)
	}
	now, err := s.queries.ClockNow(ctx, s.pool)
	if err != nil {
		return nil, Internal(err)
	}
	k := s.keyInfo(row, now)
	if k.Attempts, err = s.keyAttempts(ctx, k); err != nil {
		return nil, err
	}
	switch k.Flow {
	case s.rides.Name:
		if k.Ride, err = s.keyRide(ctx, k.ID); err != nil {
			return nil, err
		}
	case s.completions.Name, s.cancellations.Name, s.balances.Name, s.refunds.Name:
		// A request about a ride names it in its params.
		var p struct {
			RideID int64 `json:"ride_id"`
		}
		if json.Unmarshal(k.Params, &p) == nil && p.RideID > 0 {
			ride, err := s.queries.RideGet(ctx, s.pool, p.RideID)
			switch {
			case err == nil:
				k.Ride = &KeyRide{ID: ride.ID, ChargeStatus: RideChargeStatus(ride.ChargeStatus)}
			case !IsNoRows(err):
				return nil, Internal(err)
			}
		}
	}
	return k, s.attachCompletions(ctx, []*KeyInfo{k})
}

// keyRide is the ride made under key keyID, nil when none is; a ride
// waiting for its rider comes with its deadline's job.
func (s *Service) keyRide(ctx context.Context, keyID int64) (*KeyRide, error) {
	ride, err := s.queries.RideGetByIdempotencyKey(ctx, s.pool, &keyID)
	if IsNoRows(err) {
		return nil, nil
	}
	if err != nil {
		return nil, Internal(err)
	}
	kr := &KeyRide{ID: ride.ID, ChargeStatus: RideChargeStatus(ride.ChargeStatus)}
	if kr.ChargeStatus != RideChargeRequiresAction {
		return kr, nil
	}
	kr.WaitsUntil = ride.ActionExpiresAt
	res, err := s.jobs.JobList(ctx, river.NewJobListParams().
		Kinds(RideActionExpireArgs{}.Kind()).
		States(rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
			rivertype.JobStateRetryable, rivertype.JobStateScheduled, rivertype.JobStateDiscarded,
			rivertype.JobStateCompleted, rivertype.JobStateCancelled).
		Where("args->>'ride_id' = @id", river.NamedArgs{"id": strconv.FormatInt(ride.ID, 10)}).
		OrderBy(river.JobListOrderByID, river.SortOrderDesc).
		First(1))
	if err != nil {
		return nil, Internal(err)
	}
	for _, job := range res.Jobs {
		kr.Expiry = &KeyCompletionJob{JobID: job.ID, State: job.State, Attempt: job.Attempt, MaxAttempts: job.MaxAttempts}
	}
	return kr, nil
}

// attachCompletions sets the latest completion job of each key.
func (s *Service) attachCompletions(ctx context.Context, keys []*KeyInfo) error {
	if len(keys) == 0 {
		return nil
	}
	ids := make([]string, len(keys))
	byID := make(map[int64]*KeyInfo, len(keys))
	for i, k := range keys {
		ids[i] = strconv.FormatInt(k.ID, 10)
		byID[k.ID] = k
	}
	res, err := s.jobs.JobList(ctx, river.NewJobListParams().
		Kinds(KeyCompleteArgs{}.Kind()).
		States(rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
			rivertype.JobStateRetryable, rivertype.JobStateScheduled, rivertype.JobStateDiscarded,
			rivertype.JobStateCompleted, rivertype.JobStateCancelled).
		Where("args->>'key_id' = ANY(@ids::text[])", river.NamedArgs{"ids": ids}).
		OrderBy(river.JobListOrderByID, river.SortOrderAsc).
		First(10000))
	if err != nil {
		return Internal(err)
	}
	for _, job := range res.Jobs {
		keyID, err := completionKeyID(job)
		if err != nil {
			return err
		}
		if k := byID[keyID]; k != nil {
			k.Completion = completionJob(job) // ascending ids: the latest wins
		}
	}
	return nil
}

// completionKeyID is the key a completion job drives.
func completionKeyID(job *rivertype.JobRow) (int64, error) {
	var args KeyCompleteArgs
	if err := json.Unmarshal(job.EncodedArgs, &args); err != nil {
		return 0, Internal(fmt.Errorf("job %d args: %w", job.ID, err))
	}
	return args.KeyID, nil
}

func completionJob(job *rivertype.JobRow) *KeyCompletionJob {
	j := &KeyCompletionJob{JobID: job.ID, State: job.State, Attempt: job.Attempt, MaxAttempts: job.MaxAttempts}
	if n := len(job.Errors); n > 0 {
		j.LastError = job.Errors[n-1].Error
	}
	return j
}
