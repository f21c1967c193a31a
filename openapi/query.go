package openapi

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// Messages of strictQuery's refusals.
const (
	msgUnknownQueryParam  = "unknown query parameter"
	msgRepeatedQueryParam = "must be given at most once"
	msgMalformedQuery     = "is not a valid URL-encoded query parameter (a bad %-escape, or a ';', which does not separate parameters)"
	msgEmptyQueryParam    = "must not be empty: give a value, or leave the parameter out"
)

// strictQuery is an operation middleware that takes a query only if every
// parameter in it is one the operation declares, given once, and properly
// URL-encoded, with a value. Otherwise it answers one 422 (as for every
// other bad query parameter) that names each parameter at fault in
// errors[].location, query.<name>: "unknown query parameter", "must be
// given at most once", that the pair is not valid URL encoding, or that
// its value is empty (no parameter of the API takes an empty value, and
// Huma would read one as the parameter left out).
//
// Left to itself, Huma reads the first of repeated values and ignores the
// parameters it does not know, and the pairs url.ParseQuery cannot decode
// are dropped: a misspelt filter (created[gt] for created[gte]) would
// silently list everything. Huma's Operation.RejectUnknownQueryParameters
// refuses unknown names only, after the operation's middlewares, in map
// order; this does the three checks in one pass, in the query's order.
//
// It reads the declared parameters from the operation serving the request
// (huma.Register fills them in from the input struct), so any operation
// can use it as is, after its authentication (a client that may not call
// the operation learns nothing of its parameters):
//
//	Middlewares: huma.Middlewares{h.requireRider, h.strictQuery}
//
// An exploded array parameter (`query:"name,explode"`) may be repeated,
// and a deepObject one (`query:"name,deepObject"`) takes any name[key].
func (h *handlers) strictQuery(ctx huma.Context, next func(huma.Context)) {
	raw := ctx.URL().RawQuery
	if raw == "" {
		next(ctx)
		return
	}
	if errs := queryFaults(ctx.Operation(), raw); len(errs) > 0 {
		_ = huma.WriteErr(h.api, ctx, http.StatusUnprocessableEntity, "validation failed", errs...)
		return
	}
	next(ctx)
}

// queryFaults returns an error detail for each fault of the raw query
// against op's query parameters, in the order of the query.
func queryFaults(op *huma.Operation, raw string) []error {
	type param struct{ repeatable bool }
	known := map[string]param{}
	var prefixes []string
	for _, p := range op.Parameters {
		if p == nil || p.In != "query" {
			continue
		}
		if p.Style == "deepObject" {
			prefixes = append(prefixes, p.Name+"[")
			continue
		}
		known[p.Name] = param{repeatable: p.Explode != nil && *p.Explode && p.Schema != nil && p.Schema.Type == huma.TypeArray}
	}
	isKnown := func(name string) (param, bool) {
		if p, ok := known[name]; ok {
			return p, true
		}
		for _, prefix := range prefixes {
			if strings.HasPrefix(name, prefix) {
				return param{}, true
			}
		}
		return param{}, false
	}

	var errs []error
	count := map[string]int{}
	// The pairs as url.ParseQuery splits and decodes them. A parameter at
	// fault twice over is named once, its messages joined (onePerLocation).
	for _, pair := range strings.Split(raw, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		name, kerr := url.QueryUnescape(k)
		if kerr != nil {
			name = k
		}
		value, verr := url.QueryUnescape(v)
		p, ok := isKnown(name)
		msg := ""
		switch {
		case kerr != nil || verr != nil || strings.Contains(pair, ";"):
			msg = msgMalformedQuery
		case !ok:
			msg = msgUnknownQueryParam
		case count[name] == 1 && !p.repeatable:
			msg = msgRepeatedQueryParam
		case value == "":
			msg = msgEmptyQueryParam
		}
		if msg != "" {
			errs = append(errs, &huma.ErrorDetail{Location: "query." + name, Message: msg})
		}
		count[name]++
	}
	return errs
}
