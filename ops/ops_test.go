// Package ops_test checks the operators' files in ops/: the Prometheus rules
// (with promtool) and the Grafana dashboard, against the metrics the service
// exports.
package ops_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/atomicrides/atomicrides/internal/limits"
	"github.com/atomicrides/atomicrides/internal/testkit"
	"github.com/atomicrides/atomicrides/openapi"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/payments"
	"github.com/atomicrides/atomicrides/service/receipts"
	"github.com/atomicrides/atomicrides/service/settlements"
	"github.com/atomicrides/atomicrides/sql/dbtest"
)

const (
	rulesFile     = "prometheus/rules.yml"
	rulesTestFile = "prometheus/rules_test.yml"
	dashboardFile = "grafana/dashboard.json"
)

// promtool finds promtool (Debian's prometheus package; .ci/run installs
// it). Without it the test fails: the rules would go unchecked.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: apt-get install -y --no-install-recommends prometheus")
	}
	return path
}

func TestRulesPassPromtool(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"test", "rules", rulesTestFile},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// ruleGroups is the part of a rules file this test reads.
type ruleGroups struct {
	Groups []struct {
		Rules []struct {
			Record      string            `yaml:"record"`
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T) ruleGroups {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	var rg ruleGroups
	require.NoError(t, yaml.Unmarshal(b, &rg))
	require.NotEmpty(t, rg.Groups)
	return rg
}

// runbookBase is where the alerts' runbook_url point: the repository's
// docs on GitHub, the files in this checkout.
const runbookBase = "https://github.com/atomicrides/atomicrides/blob/main/"

// headingAnchor is the anchor GitHub gives a Markdown heading: lower case,
// punctuation dropped, spaces as hyphens.
func headingAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Every alert has a summary and a runbook, and its runbook_url names a
// heading of a document in this repository ("### Alert: Name").
func TestAlertsLinkToTheirRunbooks(t *testing.T) {
	t.Parallel()
	anchors := map[string]map[string]bool{}
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			require.NotEmpty(t, r.Annotations["summary"], "alert %s has a summary", r.Alert)
			url := r.Annotations["runbook_url"]
			doc, anchor, ok := strings.Cut(strings.TrimPrefix(url, runbookBase), "#")
			require.True(t, strings.HasPrefix(url, runbookBase) && ok, "alert %s: runbook_url %q is a heading under %s", r.Alert, url, runbookBase)
			require.Equal(t, "alert-"+strings.ToLower(r.Alert), anchor, "alert %s links to its own runbook", r.Alert)
			if anchors[doc] == nil {
				b, err := os.ReadFile("../" + doc)
				require.NoError(t, err, "alert %s: its runbook's document", r.Alert)
				anchors[doc] = map[string]bool{}
				for line := range strings.Lines(string(b)) {
					if h := strings.TrimLeft(line, "#"); len(h) < len(line) && strings.HasPrefix(h, " ") {
						anchors[doc][headingAnchor(strings.TrimSpace(h))] = true
					}
				}
			}
			require.True(t, anchors[doc][anchor], "alert %s: %s has no heading #%s", r.Alert, doc, anchor)
		}
	}
}

// dashboardExprs returns the PromQL of every panel target.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	var exprs []string
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "every panel queries something")
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr)
			exprs = append(exprs, tg.Expr)
		}
	}
	return exprs
}

var (
	// metricName matches the service's metric names in PromQL; every metric
	// the rules and the dashboard read is the service's own.
	metricName = regexp.MustCompile(`\batomicrides_[a-z0-9_]+\b`)
	// recordedName matches the recording rules' names.
	recordedName = regexp.MustCompile(`\batomicrides:[a-z0-9_:]+\b`)
)

// exportedNames serves /metrics from the registry as serve builds it (the
// runtime and process collectors, the service's and the HTTP handler's
// metrics) and returns the names of the series it shows.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	pool := dbtest.New(t)
	svc, err := service.New(service.Config{
		Pool:       pool,
		Payments:   payments.New(payments.Config{APIBase: "http://127.0.0.1:1", SecretKey: "sk_test_ops"}),
		Registerer: registry,
	})
	require.NoError(t, err)
	_, err = settlements.New(settlements.Config{Engine: svc.Engine(), Jobs: svc.Jobs(), Registerer: registry})
	require.NoError(t, err)
	_, err = receipts.New(receipts.Config{Engine: svc.Engine(), Registerer: registry})
	require.NoError(t, err)
	// The admission control as serve builds it: a limit learnt within the
	// bounds of a small pool, its gauges on the registry.
	metrics := limits.NewMetrics(registry)
	minLimit, maxLimit := limits.Bounds(4)
	admission := limits.NewAdmission(limits.AdmissionConfig{Min: minLimit, Max: maxLimit, Metrics: metrics})
	registry.MustRegister(admission.Collector())
	const token = "ops-test-token"
	srv := httptest.NewServer(testkit.Conform(t, openapi.NewHandler(openapi.Config{
		Service: svc, Accounts: testkit.NewAccounts(t, svc, nil), AdminToken: token, Metrics: registry, Logger: slog.New(slog.DiscardHandler),
		Limits: openapi.Limits{Metrics: metrics, Admission: admission},
	})))
	t.Cleanup(srv.Close)

	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)

	names := map[string]bool{}
	for name, mf := range families {
		if len(mf.GetMetric()) == 0 {
			continue // declared, no series: PromQL would find nothing
		}
		switch mf.GetType().String() {
		case "HISTOGRAM":
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case "SUMMARY":
			names[name+"_sum"], names[name+"_count"], names[name] = true, true, true
		default:
			names[name] = true
		}
	}
	return names
}

func TestRulesAndDashboardReadOnlyExportedMetrics(t *testing.T) {
	t.Parallel()
	rules := readRules(t)
	recorded := map[string]bool{}
	var ruleExprs []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Expr, "rule %s%s", r.Record, r.Alert)
			if r.Record != "" {
				recorded[r.Record] = true
			}
			ruleExprs = append(ruleExprs, r.Expr)
		}
	}
	exprs := append(ruleExprs, dashboardExprs(t)...)
	exported := exportedNames(t)

	var missing, unrecorded []string
	used := map[string]bool{}
	for _, e := range exprs {
		for _, name := range metricName.FindAllString(e, -1) {
			used[name] = true
			if !exported[name] {
				missing = append(missing, name)
			}
		}
		for _, name := range recordedName.FindAllString(e, -1) {
			if !recorded[name] {
				unrecorded = append(unrecorded, name)
			}
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "metrics read by the rules or the dashboard that /metrics does not show")
	require.Empty(t, unrecorded, "recording rules used but not defined in "+rulesFile)

	// What the issue asks the alerts and the dashboard to cover.
	for _, name := range []string{
		"atomicrides_completer_dead_letters",
		"atomicrides_reaper_unfinished_past_retention",
		"atomicrides_stripe_config_errors_total",
		"atomicrides_payment_calls_total",
		"atomicrides_receipts_total",
		"atomicrides_reconcile_orphans",
		"atomicrides_reconcile_last_run_timestamp_seconds",
		"atomicrides_http_request_duration_seconds_bucket",
		"atomicrides_http_requests_total",
		"atomicrides_phase_duration_seconds_bucket",
		"atomicrides_completer_last_run_timestamp_seconds",
		"atomicrides_completer_completions_total",
		"atomicrides_reaper_deleted_keys_total",
		"atomicrides_settlement_lines_total",
		"atomicrides_settlement_discrepancies",
		"atomicrides_http_refused_total",
		"atomicrides_admission_limit",
		"atomicrides_admission_limit_min",
		"atomicrides_admission_limit_max",
		"atomicrides_admission_in_flight",
		"atomicrides_admission_queued",
		"atomicrides_admission_admitted_total",
		"atomicrides_admission_refused_total",
		"atomicrides_admission_backoffs_total",
		"atomicrides_admission_retry_after_seconds",
	} {
		require.True(t, used[name], "%s is read by a rule or a panel", name)
	}
}
