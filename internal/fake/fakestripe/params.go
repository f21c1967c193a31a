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
