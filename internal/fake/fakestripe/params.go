package fakestripe

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// paramBase is the top-level name of a form key: "metadata" for
// "metadata[ride_id]", "expand" for "expand[0]".
func paramBase(key string) string {
	base, _, _ := strings.Cut(key, "[")
	return base
}

// rejectUnknown answers 400 parameter_unknown for the first parameter whose
// base name is not allowed, as Stripe does.
func rejectUnknown(params url.Values, allowed ...string) (response, bool) {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(allowed, paramBase(k)) {
			return invalidParam("parameter_unknown", k, "Received unknown parameter: "+k), true
		}
	}
	return response{}, false
}

// metadataParams collects "metadata[key]=value" parameters.
func metadataParams(params url.Values) map[string]string {
	md := map[string]string{}
	for k, v := range params {
		inner, ok := strings.CutPrefix(k, "metadata[")
		if !ok || !strings.HasSuffix(inner, "]") || len(v) == 0 {
			continue
		}
		md[strings.TrimSuffix(inner, "]")] = v[len(v)-1]
	}
	return md
}

// intParam parses an optional integer parameter. present is false when the
// parameter is absent; bad is the 400 to answer when it does not parse.
func intParam(params url.Values, name string) (n int64, present bool, bad response, ok bool) {
	raw := params.Get(name)
	if raw == "" {
		return 0, false, response{}, true
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, true, invalidParam("parameter_invalid_integer", name, "Invalid integer: "+raw), false
	}
	return n, true, response{}, true
}

// boolParam parses an optional boolean parameter, "true" or "false" as
// stripe-go sends them. present is false when the parameter is absent.
func boolParam(params url.Values, name string) (b, present bool, bad response, ok bool) {
	switch raw := params.Get(name); raw {
	case "":
		return false, false, response{}, true
	case "true":
		return true, true, response{}, true
	case "false":
		return false, true, response{}, true
	default:
		return false, true, invalidParam("", name, "Invalid boolean: "+raw), false
	}
}

// listParam collects the values of an array parameter sent as
// "name[0]=a&name[1]=b" (or "name[]=a"), in index order.
func listParam(params url.Values, name string) []string {
	type item struct {
		index int
		value string
	}
	var items []item
	for k, vs := range params {
		inner, ok := strings.CutPrefix(k, name+"[")
		if !ok || !strings.HasSuffix(inner, "]") {
			continue
		}
		i, err := strconv.Atoi(strings.TrimSuffix(inner, "]"))
		if err != nil {
			i = -1 // "name[]": in the order sent
		}
		for _, v := range vs {
			items = append(items, item{i, v})
		}
	}
	slices.SortStableFunc(items, func(a, b item) int { return a.index - b.index })
	out := make([]string, 0, len(items))
	for _, it := range items {
		out = append(out, it.value)
	}
	return out
}

// amountParams reads the amount (a positive integer in the currency's
// minor unit) and the currency (three letters, lower-cased) of a charge or
// a PaymentIntent, answering Stripe's error when either is missing or
// invalid.
func amountParams(params url.Values) (amount int64, currency string, bad response, ok bool) {
	amount, present, bad, ok := intParam(params, "amount")
	switch {
	case !ok:
		return 0, "", bad, false
	case !present:
		return 0, "", missingParam("amount"), false
	case amount < 1:
		return 0, "", invalidParam("amount_too_small", "amount", "This value must be greater than or equal to 1."), false
	}
	currency = strings.ToLower(params.Get("currency"))
	switch {
	case currency == "":
		return 0, "", missingParam("currency"), false
	case len(currency) != 3:
		return 0, "", invalidParam("", "currency", "Invalid currency: "+currency+"."), false
	}
	return amount, currency, response{}, true
}
