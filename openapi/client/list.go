package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
)

// ErrListBackwards is the error of RideAll when asked to page backwards
// (params.EndingBefore set): it reads from newest to oldest only.
var ErrListBackwards = errors.New("client: RideAll reads forwards only; page with ending_before through RideList")

// RideAll yields the rider's rides newest first, every one once, reading
// pages of params (limit, filters, and starting_after to start below a
// ride) and following the cursor of each page to the next while the server
// says it has more. Rides booked while it reads are not among them (they
// are newer than the first page). It stops at the first failure, yielding
// it as the error: a transport error, or *ListError for an answer other
// than 200.
func RideAll(ctx context.Context, c ClientInterface, params RideListParams) iter.Seq2[Ride, error] {
	return func(yield func(Ride, error) bool) {
		if params.EndingBefore != nil {
			yield(Ride{}, ErrListBackwards)
			return
		}
		for {
			resp, err := c.RideList(ctx, &params)
			if err != nil {
				yield(Ride{}, err)
				return
			}
			page, err := ParseRideListReply(resp)
			if err != nil {
				yield(Ride{}, err)
				return
			}
			if page.JSON200 == nil {
				yield(Ride{}, &ListError{Status: page.StatusCode(), Body: page.Body})
				return
			}
			for _, r := range page.JSON200.Data {
				if !yield(r, nil) {
					return
				}
			}
			data := page.JSON200.Data
			if !page.JSON200.HasMore || len(data) == 0 {
				return
			}
			last := data[len(data)-1].ID
			params.StartingAfter = &last
		}
	}
}

// ListError is an answer to a list request other than 200: its status and
// its body (a problem+json document).
type ListError struct {
	Status int
	Body   []byte
}

func (e *ListError) Error() string {
	return fmt.Sprintf("client: list answered %d: %s", e.Status, e.Body)
}
