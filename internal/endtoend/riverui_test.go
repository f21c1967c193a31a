package endtoend

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atomicrides/atomicrides/internal/binrun"
)

// TestRiverUIRefusesOtherSites drives River UI's API as another site would
// through an operator's browser holding the Basic credentials (a text/plain
// form or fetch): every attempt is refused and the job stays. The requests
// River UI's own page makes (same-origin fetches, JSON without a
// Content-Type) and a JSON call from a script keep working.
func TestRiverUIRefusesOtherSites(t *testing.T) {
	t.Parallel()
	s := serveBinary(t)
	s.rider(t, "ui-one@example.com")
	s.rider(t, "ui-two@example.com")
	var jobs []int64
	binrun.WaitFor(t, time.Minute, "the customer jobs to complete", func() bool {
		return s.count(t, `SELECT count(*) FROM river_job WHERE kind = 'customer_create' AND state = 'completed'`) == 2
	})
	for _, offset := range []int{0, 1} {
		jobs = append(jobs, s.count(t, `SELECT id FROM river_job WHERE kind = 'customer_create' ORDER BY id OFFSET $1 LIMIT 1`, offset))
	}
	jobExists := func(id int64) bool {
		return s.count(t, `SELECT count(*) FROM river_job WHERE id = $1`, id) == 1
	}

	call := func(method, path, body string, headers map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.SetBasicAuth("operator", s.adminToken)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp := s.request(t, req)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}

	// The page and its job list, as the operator's browser loads them.
	status, page := call(http.MethodGet, "/riverui/", "", map[string]string{"Sec-Fetch-Site": "none"})
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "<html")
	status, list := call(http.MethodGet, "/riverui/api/jobs?state=completed", "", map[string]string{
		"Sec-Fetch-Site": "same-origin", "Accept": "application/json",
	})
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, list, `"id":`+strconv.FormatInt(jobs[0], 10))

	deleteJob := `{"ids":["` + strconv.FormatInt(jobs[0], 10) + `"]}`
	for name, attempt := range map[string]struct {
		headers map[string]string
		status  int
	}{
		"text/plain from another site":           {map[string]string{"Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, http.StatusForbidden},
		"text/plain with a foreign Origin only":  {map[string]string{"Content-Type": "text/plain", "Origin": "https://evil.example"}, http.StatusForbidden},
		"JSON from another site":                 {map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		"a form from a sibling subdomain":        {map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		"text/plain without browser headers":     {map[string]string{"Content-Type": "text/plain"}, http.StatusUnsupportedMediaType},
		"no Content-Type without browser header": {nil, http.StatusUnsupportedMediaType},
	} {
		status, body := call(http.MethodPost, "/riverui/api/jobs/delete", deleteJob, attempt.headers)
		require.Equal(t, attempt.status, status, "%s: %s", name, body)
		require.Contains(t, body, `"status":`+strconv.Itoa(attempt.status), name)
		require.True(t, jobExists(jobs[0]), "%s: the job is still there", name)
	}

	// River UI's own page: fetch of a JSON string with no Content-Type,
	// which the browser sends as text/plain from this origin.
	status, body := call(http.MethodPost, "/riverui/api/jobs/delete", deleteJob, map[string]string{
		"Content-Type": "text/plain;charset=UTF-8", "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors",
		"Origin": s.base, "Accept": "application/json",
	})
	require.Equal(t, http.StatusOK, status, body)
	require.JSONEq(t, `{"status":"ok"}`, body)
	require.False(t, jobExists(jobs[0]))

	// A script's JSON call.
	status, body = call(http.MethodPost, "/riverui/api/jobs/delete", `{"ids":["`+strconv.FormatInt(jobs[1], 10)+`"]}`,
		map[string]string{"Content-Type": "application/json"})
	require.Equal(t, http.StatusOK, status, body)
	require.False(t, jobExists(jobs[1]))
}
