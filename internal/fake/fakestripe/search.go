package fakestripe

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// metadataQuery is the only search query form supported:
// metadata['key']:'value' (double quotes are accepted too).
var metadataQuery = regexp.MustCompile(`^metadata\[\s*['"]([^'"]+)['"]\s*\]\s*:\s*['"]([^'"]*)['"]$`)

const (
	defaultSearchLimit = 10
	maxSearchLimit     = 100
	pagePrefix         = "page_"
)

// search answers a search endpoint at url: it parses the query, lets find
// collect the matching objects (in creation order) and returns one page of
// them, newest first.
func (c *call) search(url string, find func(key, value string) []any) response {
	if bad, ok := rejectUnknown(c.params, "query", "limit", "page", "expand"); ok {
		return bad
	}
	query := strings.TrimSpace(c.params.Get("query"))
	if query == "" {
		return missingParam("query")
	}
	m := metadataQuery.FindStringSubmatch(query)
	if m == nil {
		return invalidParam("", "query",
			"Unsupported search query: "+query+". This server supports only metadata['key']:'value'.")
	}
	limit, present, bad, ok := intParam(c.params, "limit")
	switch {
	case !ok:
		return bad
	case !present:
		limit = defaultSearchLimit
	case limit < 1 || limit > maxSearchLimit:
		return invalidParam("parameter_invalid_integer", "limit", "This value must be between 1 and 100.")
	}
	offset := 0
	if page := c.params.Get("page"); page != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(page, pagePrefix))
		if err != nil || n < 0 || !strings.HasPrefix(page, pagePrefix) {
			return invalidParam("", "page", "Invalid page: "+page+".")
		}
		offset = n
	}

	found := find(m[1], m[2])
	slices.Reverse(found)
	res := searchResult{Object: "search_result", Data: []any{}, URL: url}
	if offset < len(found) {
		end := min(offset+int(limit), len(found))
		res.Data = found[offset:end]
		if end < len(found) {
			res.HasMore = true
			res.NextPage = nullable(pagePrefix + strconv.Itoa(end))
		}
	}
	return okResponse(res)
}
