package layout_test

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/atomicrides/atomicrides/"

// mayImport lists, for each package (relative to the module), the module's
// packages its non-test files may import. A package not listed here may
// import any of the module's packages; a new package under service/ must be
// listed.
var mayImport = map[string][]string{
	// The engine: the generated queries of idempotency_keys and small
	// helpers; no domain, no adapter.
	"service/idem": {"dbgen", "internal/failpoint", "internal/retry", "internal/ttlcache"},
	// The domain's vocabulary and the flows not yet in packages of their
	// own: the engine, the audit trail and its own file format, never an
	// adapter nor a domain package (they import it).
	"service": {"dbgen", "internal/failpoint", "internal/retry", "internal/telemetry", "internal/ttlcache",
		"service/audit", "service/idem", "service/settlementfile"},
	// The audit trail: its table's queries alone.
	"service/audit": {"dbgen"},
	// Domain packages: the vocabulary, the engine and the audit trail; never
	// an adapter, nor another domain package's internals.
	"service/accounts":    {"dbgen", "internal/retry", "internal/ttlcache", "service", "service/audit", "service/idem"},
	"service/settlements": {"dbgen", "internal/failpoint", "service", "service/idem", "service/settlementfile"},
	"service/receipts":    {"dbgen", "service", "service/idem"},
	// Adapters at the edges reach the domain, not the engine.
	"service/adyen":          {"internal/telemetry", "service"},
	"service/payments":       {"internal/telemetry", "service"},
	"service/mail":           {"internal/telemetry", "service"},
	"service/bankinbox":      {},
	"service/settlementfile": {},
	"openapi":                {"internal/limits", "internal/telemetry", "openapi/httpctx", "service", "service/accounts"},
	"jobs":                   {"internal/failpoint", "service", "service/bankinbox", "service/receipts", "service/settlements"},
	"dbgen":                  {},
}

// engineThirdParty are the only modules outside the standard library the
// engine builds on.
var engineThirdParty = []string{"github.com/jackc/pgx/v5", "github.com/google/uuid", "go.opentelemetry.io/otel"}

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	require.NoError(t, err)
	return dir
}

func TestWhoMayImportWhom(t *testing.T) {
	t.Parallel()
	for pkg, allowed := range mayImport {
		p, err := build.ImportDir(filepath.Join(root(t), pkg), 0)
		require.NoError(t, err, pkg)
		for _, imp := range p.Imports {
			rel, ours := strings.CutPrefix(imp, module)
			if !ours {
				continue
			}
			require.Contains(t, allowed, rel, "%s imports %s: see docs/architecture.md for who may import whom", pkg, rel)
		}
	}
}

func TestEngineImportsNoDomain(t *testing.T) {
	t.Parallel()
	p, err := build.ImportDir(filepath.Join(root(t), "service/idem"), 0)
	require.NoError(t, err)
	for _, imp := range p.Imports {
		if _, ours := strings.CutPrefix(imp, module); ours || !strings.Contains(strings.Split(imp, "/")[0], ".") {
			continue // the module's (TestWhoMayImportWhom) or the standard library
		}
		require.True(t, slices.ContainsFunc(engineThirdParty, func(m string) bool { return strings.HasPrefix(imp, m) }),
			"the engine imports %s", imp)
	}
}

// TestEngineUsesOnlyItsQueries: of the generated queries, the engine uses
// those of idempotency_keys only.
func TestEngineUsesOnlyItsQueries(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(root(t), "service/idem")
	p, err := build.ImportDir(dir, 0)
	require.NoError(t, err)
	fset := token.NewFileSet()
	used := map[string]bool{}
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "dbgen" {
					used[sel.Sel.Name] = true
				}
			}
			return true
		})
	}
	require.NotEmpty(t, used)
	for name := range used {
		ok := strings.HasPrefix(name, "IdempotencyKey") || slices.Contains([]string{"DBTX", "New", "Queries"}, name)
		require.True(t, ok, "the engine uses dbgen.%s, which is not of idempotency_keys", name)
	}
}
