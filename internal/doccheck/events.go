package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// HandledAdyenCodes returns the event codes an Adyen notifications source
// file names as its constants Event… (service/adyen/notifications.go): the
// codes the service acts on.
func HandledAdyenCodes(src []byte) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "", src, 0)
	if err != nil {
		return nil, fmt.Errorf("doccheck: Adyen notifications: %w", err)
	}
	var codes []string
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Event") || i >= len(vs.Values) {
					continue
				}
				if s, ok := stringLit(vs.Values[i]); ok {
					codes = append(codes, s)
				}
			}
		}
	}
	if len(codes) == 0 {
		return nil, fmt.Errorf("doccheck: Adyen notifications: no Event… constant")
	}
	slices.Sort(codes)
	return slices.Compact(codes), nil
}

// HandledStripeTypes returns the event types a Stripe events source file
// (service/payments/webhooks.go) tells apart: each string its code
// compares the event's type t with (t == "charge.succeeded"), and each
// prefix it tests t for (strings.HasPrefix(t, "refund.")) as a family,
// "refund.*".
func HandledStripeTypes(src []byte) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "", src, 0)
	if err != nil {
		return nil, fmt.Errorf("doccheck: Stripe events: %w", err)
	}
	isT := func(e ast.Expr) bool { id, ok := e.(*ast.Ident); return ok && id.Name == "t" }
	var types []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if n.Op != token.EQL {
				break
			}
			for _, pair := range [][2]ast.Expr{{n.X, n.Y}, {n.Y, n.X}} {
				if s, ok := stringLit(pair[1]); ok && isT(pair[0]) {
					types = append(types, s)
				}
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "HasPrefix" || len(n.Args) != 2 || !isT(n.Args[0]) {
				break
			}
			if s, ok := stringLit(n.Args[1]); ok {
				types = append(types, s+"*")
			}
		}
		return true
	})
	if len(types) == 0 {
		return nil, fmt.Errorf("doccheck: Stripe events: no event type compared")
	}
	slices.Sort(types)
	return slices.Compact(types), nil
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// EventRow is a row of a page's table of events: the events its first
// column names, and its effect, the rest of the row.
type EventRow struct {
	Line   int
	Names  []string
	Effect string
}

// Ignored is the effect that says an event is not acted on.
const Ignored = "ignored_type"

var eventNameRe = regexp.MustCompile("`([^`]+)`")

// EventTable returns the rows of the first table under the heading
// heading (its text, as written) of a Markdown page. The names of a row
// are the code spans of its first column; a span that begins with a dot
// continues the name before it (`payment_intent.succeeded`, `.canceled`
// names payment_intent.canceled).
func EventTable(content, heading string) ([]EventRow, error) {
	lines := strings.Split(content, "\n")
	start := slices.IndexFunc(lines, func(l string) bool {
		return strings.HasPrefix(l, "#") && strings.TrimSpace(strings.TrimLeft(l, "#")) == heading
	})
	if start < 0 {
		return nil, fmt.Errorf("doccheck: no heading %q", heading)
	}
	var rows []EventRow
	for i := start + 1; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "#") {
			break
		}
		if !strings.HasPrefix(l, "|") {
			if len(rows) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		if len(cells) < 2 || strings.Trim(cells[0], " -:") == "" {
			continue // the delimiter row
		}
		row := EventRow{Line: i + 1, Effect: strings.Join(cells[1:], "|")}
		prev := ""
		for _, m := range eventNameRe.FindAllStringSubmatch(cells[0], -1) {
			name := m[1]
			if strings.HasPrefix(name, ".") && prev != "" {
				name = prev[:strings.LastIndex(prev, ".")] + name
			}
			row.Names = append(row.Names, name)
			prev = name
		}
		rows = append(rows, row)
	}
	if len(rows) < 2 {
		return nil, fmt.Errorf("doccheck: no table of events under %q", heading)
	}
	return rows[1:], nil // the header row names no event
}

// CheckEvents reports each event the code handles that the table's rows
// do not name, or name only as ignored (Ignored). A family the code tells
// apart by prefix ("refund.*") is documented by a row naming the family,
// or any event of it.
func CheckEvents(file string, rows []EventRow, handled []string) []Problem {
	var problems []Problem
	for _, h := range handled {
		family, isFamily := strings.CutSuffix(h, "*")
		matches := func(name string) bool {
			if isFamily {
				return strings.HasPrefix(name, family)
			}
			return name == h || (strings.HasSuffix(name, "*") && strings.HasPrefix(h, strings.TrimSuffix(name, "*")))
		}
		documented, ignored := false, false
		for _, r := range rows {
			if !slices.ContainsFunc(r.Names, matches) {
				continue
			}
			if strings.Contains(r.Effect, Ignored) {
				ignored = true
				problems = append(problems, Problem{File: file, Line: r.Line, Msg: fmt.Sprintf("%s is handled by the code, yet this row says it is ignored (%s)", h, Ignored)})
				continue
			}
			documented = true
		}
		if !documented && !ignored && len(rows) > 0 {
			problems = append(problems, Problem{File: file, Line: rows[0].Line, Msg: fmt.Sprintf("%s is handled by the code, yet no row of this table says what it does", h)})
		}
	}
	return problems
}
