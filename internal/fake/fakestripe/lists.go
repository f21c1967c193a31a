package fakestripe

import (
	"net/http"
	"slices"
	"time"
)

// createdFilter is Stripe's "created" list filter: created[gte], [gt],
// [lte] and [lt] in Unix seconds, or created=N for one exact second.
type createdFilter struct {
	gte, lte *int64
}

// parseCreated reads the created filter of a list request.
func (c *call) parseCreated() (createdFilter, response, bool) {
	var f createdFilter
	for _, b := range []struct {
		name  string
		adj   int64
		upper bool
	}{
		{"created", 0, false}, {"created", 0, true},
		{"created[gte]", 0, false}, {"created[gt]", 1, false},
		{"created[lte]", 0, true}, {"created[lt]", -1, true},
	} {
		n, present, bad, ok := intParam(c.params, b.name)
		if !ok {
			return f, bad, false
		}
		if !present {
			continue
		}
		n += b.adj
		if b.upper {
			f.lte = &n
		} else {
			f.gte = &n
		}
	}
	return f, response{}, true
}

func (f createdFilter) match(t time.Time) bool {
	s := unix(t)
	return (f.gte == nil || s >= *f.gte) && (f.lte == nil || s <= *f.lte)
}

// listPage answers one page of a list at url: objects are given oldest
// first and listed newest first, from after the one named by
// starting_after, as Stripe's lists are.
func listPage[T any](c *call, url, objectType string, items []*T, id func(*T) string, object func(*T) any) response {
	limit, present, bad, ok := intParam(c.params, "limit")
	switch {
	case !ok:
		return bad
	case !present:
		limit = defaultSearchLimit
	case limit < 1 || limit > maxSearchLimit:
		return invalidParam("parameter_invalid_integer", "limit", "This value must be between 1 and 100.")
	}
	found := slices.Clone(items)
	slices.Reverse(found)
	if after := c.params.Get("starting_after"); after != "" {
		i := slices.IndexFunc(found, func(x *T) bool { return id(x) == after })
		if i < 0 {
			return noSuchObject(http.StatusBadRequest, objectType, "starting_after", after)
		}
		found = found[i+1:]
	}
	res := listResult{Object: "list", Data: []any{}, URL: url}
	for i, x := range found {
		if i == int(limit) {
			res.HasMore = true
			break
		}
		res.Data = append(res.Data, object(x))
	}
	return okResponse(res)
}

// chargeList is GET /v1/charges: every charge, newest first, optionally
// of one customer or PaymentIntent and within a created range.
func (c *call) chargeList() response {
	if bad, ok := rejectUnknown(c.params, "customer", "payment_intent", "created", "limit", "starting_after", "expand"); ok {
		return bad
	}
	created, bad, ok := c.parseCreated()
	if !ok {
		return bad
	}
	customer, intentID := c.params.Get("customer"), c.params.Get("payment_intent")
	l := &c.s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	var found []*Charge
	for _, ch := range l.charges {
		if (customer == "" || ch.Customer == customer) && (intentID == "" || ch.PaymentIntent == intentID) &&
			created.match(ch.Created) {
			found = append(found, ch)
		}
	}
	return listPage(c, "/v1/charges", "charge", found,
		func(ch *Charge) string { return ch.ID }, func(ch *Charge) any { return ch.object() })
}
