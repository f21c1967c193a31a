package service

import (
	"context"
	"slices"
	"time"

	"github.com/atomicrides/atomicrides/dbgen"
)

// Bounds of RideListParams.Limit.
const (
	RideListLimitDefault = 10
	RideListLimitMax     = 100
)

// RideListParams selects one page of a rider's rides, newest first, the way
// Stripe's list endpoints page: at most Limit rides, older than the ride
// StartingAfter or newer than the ride EndingBefore (at most one of the two
// cursors), of one charge status, created within the bounds CreatedGT,
// CreatedGTE, CreatedLT and CreatedLTE (Stripe's created[gt] … created[lte]).
// Zero values select nothing.
type RideListParams struct {
	// Limit is 1 to RideListLimitMax; 0 is RideListLimitDefault.
	Limit int
	// StartingAfter and EndingBefore are ride ids of the rider's (0: none).
	StartingAfter, EndingBefore int64
	// ChargeStatus keeps only the rides in that status ("": every ride).
	ChargeStatus RideChargeStatus
	// CreatedGT, CreatedGTE, CreatedLT and CreatedLTE bound the rides'
	// creation time: after, at or after, before, at or before (zero: no
	// bound). Any of them combine into one range, the intersection of
	// theirs; an empty range is an empty list, not an error.
	CreatedGT, CreatedGTE, CreatedLT, CreatedLTE time.Time
}

// Validate checks the page's parameters, naming the first one at fault.
func (p RideListParams) Validate() error {
	if p.Limit < 0 || p.Limit > RideListLimitMax {
		return Invalid("query.limit", "must be between 1 and %d", RideListLimitMax)
	}
	if p.StartingAfter < 0 {
		return Invalid("query.starting_after", "must be a ride id (1 or more)")
	}
	if p.EndingBefore < 0 {
		return Invalid("query.ending_before", "must be a ride id (1 or more)")
	}
	if p.StartingAfter != 0 && p.EndingBefore != 0 {
		return Invalid("query.ending_before", "starting_after and ending_before exclude each other")
	}
	switch p.ChargeStatus {
	case "", RideChargePending, RideChargeRequiresAction, RideChargeCharged, RideChargeDeclined, RideChargeExpired,
		RideChargeAuthorized, RideChargeCapturing, RideChargeCompleted, RideChargeCaptureFailed, RideChargeCancelling, RideChargeCancelled:
	default:
		return Invalid("query.charge_status", "must be pending, requires_action, charged, declined, expired, authorized, capturing, completed, capture_failed, cancelling or cancelled")
	}
	return nil
}

// RideList is one page of a rider's rides.
type RideList struct {
	// Data holds the page's rides, newest first.
	Data []*Ride `json:"data" nullable:"false" doc:"The page's rides, newest first (by created_at, then id)."`
	// HasMore tells whether more rides lie beyond the page in the
	// direction it was read: older ones after a first page or a
	// starting_after page, newer ones after an ending_before page.
	HasMore bool `json:"has_more" doc:"Whether more rides lie beyond this page in the direction it was read: older rides for a first page or a starting_after page (pass the last ride's id as starting_after), newer rides for an ending_before page (pass the first ride's id as ending_before)."`
}

// position is a place in a rider's list: rides are ordered by
// (created_at, id), and a bound (created_at, 0) stands between every ride
// created before the time and every ride created at it or later (ids start
// at 1).
type position struct {
	at time.Time
	id int64
}

func (p position) less(q position) bool {
	return p.at.Before(q.at) || p.at.Equal(q.at) && p.id < q.id
}

// createdBounds turns the creation-time filters into the positions the
// page's scan lies strictly between, narrowing lo and hi. A creation time
// is stored to the microsecond, so each filter is first made a bound on
// whole microseconds, whatever fraction of a second the client sent:
// created at or after t is at or after t rounded up, after t is at or
// after t rounded down plus 1 µs; before t is before t rounded up, at or
// before t is before t rounded down plus 1 µs. (PostgreSQL would
// otherwise receive t truncated to the microsecond, and "at or after
// 0.0000005 s" would keep a ride of 0.000000 s.)
func createdBounds(p RideListParams, lo, hi position) (position, position) {
	down := func(t time.Time) time.Time { return t.Truncate(time.Microsecond) }
	up := func(t time.Time) time.Time {
		if d := down(t); !d.Equal(t) {
			return d.Add(time.Microsecond)
		}
		return t
	}
	for _, b := range []struct {
		t     time.Time
		at    func(time.Time) time.Time
		upper bool
	}{
		{p.CreatedGTE, up, false},
		{p.CreatedGT, func(t time.Time) time.Time { return down(t).Add(time.Microsecond) }, false},
		{p.CreatedLT, up, true},
		{p.CreatedLTE, func(t time.Time) time.Time { return down(t).Add(time.Microsecond) }, true},
	} {
		if b.t.IsZero() {
			continue
		}
		// (t, 0) lies between every ride created before t and every ride
		// created at t or later (ids start at 1).
		pos := position{at: b.at(b.t)}
		if b.upper && pos.less(hi) {
			hi = pos
		}
		if !b.upper && lo.less(pos) {
			lo = pos
		}
	}
	return lo, hi
}

// The ends of every list: before and after any ride's creation time.
var (
	listStart = position{at: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)}
	listEnd   = position{at: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)}
)

// RideList returns one page of the user's rides. A cursor that is not one
// of the user's rides is CodeNotFound, whoever's ride it is: a rider learns
// nothing of other riders' ids. The page is a range scan of the rider's
// rides from the cursor's position (keyset pagination on (created_at, id)),
// so rides booked between two pages never shift the next one: reading on
// with starting_after from each page's last ride yields every ride older
// than the first page's first exactly once, in order.
func (s *Service) RideList(ctx context.Context, userID int64, p RideListParams) (*RideList, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Limit == 0 {
		p.Limit = RideListLimitDefault
	}
	lo, hi := createdBounds(p, listStart, listEnd)
	// Both bounds are exclusive: (t, 0) keeps every ride created at t, and
	// a cursor's own ride is excluded, as it should be.
	for _, c := range []struct {
		id    int64
		field string
		upper bool
	}{{p.StartingAfter, "query.starting_after", true}, {p.EndingBefore, "query.ending_before", false}} {
		if c.id == 0 {
			continue
		}
		ride, err := s.queries.RideGetForUser(ctx, s.pool, c.id, userID)
		if IsNoRows(err) {
			return nil, &Error{Code: CodeNotFound, Field: c.field, Message: "no such ride"}
		}
		if err != nil {
			return nil, Internal(err)
		}
		pos := position{at: ride.CreatedAt, id: ride.ID}
		if c.upper && pos.less(hi) {
			hi = pos
		}
		if !c.upper && lo.less(pos) {
			lo = pos
		}
	}
	if !lo.less(hi) {
		return &RideList{Data: []*Ride{}}, nil
	}

	params := dbgen.RideListForUserParams{
		UserID:          userID,
		AfterCreatedAt:  lo.at,
		AfterID:         lo.id,
		BeforeCreatedAt: hi.at,
		BeforeID:        hi.id,
		ChargeStatus:    string(p.ChargeStatus),
		RowLimit:        int32(p.Limit + 1),
	}
	var rows []*dbgen.RideListForUserRow
	var err error
	if p.EndingBefore != 0 {
		// The page just newer than the cursor: read upwards from it, then
		// turn it newest first.
		var up []*dbgen.RideListForUserAscendingRow
		up, err = s.queries.RideListForUserAscending(ctx, s.pool, dbgen.RideListForUserAscendingParams(params))
		for _, r := range up {
			rows = append(rows, (*dbgen.RideListForUserRow)(r))
		}
	} else {
		rows, err = s.queries.RideListForUser(ctx, s.pool, params)
	}
	if err != nil {
		return nil, Internal(err)
	}
	list := &RideList{Data: make([]*Ride, 0, min(len(rows), p.Limit))}
	if len(rows) > p.Limit {
		list.HasMore, rows = true, rows[:p.Limit]
	}
	for _, r := range rows {
		list.Data = append(list.Data, rideWithRefund(&r.Ride, r.RefundStatus, r.StripeRefundID, r.RefundFailureCode))
	}
	if p.EndingBefore != 0 {
		slices.Reverse(list.Data)
	}
	return list, nil
}
