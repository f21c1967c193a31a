// Package speccheck holds the OpenAPI document of the service to what a
// strict reader of OpenAPI 3.1 expects of it: the document passes
// kin-openapi's validation, with every error reported and no extension
// beside a $ref, and every example it gives (of a parameter, a body, an
// answer or a schema) validates against the schema it illustrates.
// `go tool task verify` runs its test over the committed openapi.yaml.
package speccheck

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/getkin/kin-openapi/openapi3"
)

// Check loads the document spec and returns every way it fails the
// checks above, joined; nil when it passes them all.
func Check(ctx context.Context, spec []byte) error {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(spec)
	if err != nil {
		return fmt.Errorf("speccheck: load: %w", err)
	}
	var errs []error
	if err := doc.Validate(ctx, openapi3.EnableMultiError(), openapi3.ProhibitExtensionsWithRef(), openapi3.EnableExamplesValidation()); err != nil {
		errs = append(errs, err)
	}
	w := walker{seen: map[*openapi3.Schema]bool{}}
	for _, name := range slices.Sorted(maps.Keys(doc.Components.Schemas)) {
		w.schema("#/components/schemas/"+name, doc.Components.Schemas[name])
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			at := method + " " + path
			for _, p := range op.Parameters {
				if p.Value != nil {
					w.schema(at+" parameter "+p.Value.Name, p.Value.Schema)
				}
			}
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				for mt, m := range op.RequestBody.Value.Content {
					w.schema(at+" request "+mt, m.Schema)
				}
			}
			for status, r := range op.Responses.Map() {
				if r.Value == nil {
					continue
				}
				for mt, m := range r.Value.Content {
					w.schema(at+" "+status+" "+mt, m.Schema)
				}
				for name, h := range r.Value.Headers {
					if h.Value != nil {
						w.schema(at+" "+status+" header "+name, h.Value.Schema)
					}
				}
			}
		}
	}
	errs = append(errs, w.errs...)
	return errors.Join(errs...)
}

// walker validates the examples of every schema it reaches, once each.
type walker struct {
	seen map[*openapi3.Schema]bool
	errs []error
}

func (w *walker) schema(at string, ref *openapi3.SchemaRef) {
	if ref == nil || ref.Value == nil || w.seen[ref.Value] {
		return
	}
	s := ref.Value
	w.seen[s] = true
	examples := slices.Clone(s.Examples)
	if s.Example != nil {
		examples = append(examples, s.Example)
	}
	for i, ex := range examples {
		if err := s.VisitJSON(ex, openapi3.EnableJSONSchema2020()); err != nil {
			w.errs = append(w.errs, fmt.Errorf("%s: example %d (%v): %w", at, i, ex, err))
		}
	}
	if s.Items != nil {
		w.schema(at+"/items", s.Items)
	}
	for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
		w.schema(at+"/properties/"+name, s.Properties[name])
	}
	if s.AdditionalProperties.Schema != nil {
		w.schema(at+"/additionalProperties", s.AdditionalProperties.Schema)
	}
	for kw, list := range map[string]openapi3.SchemaRefs{"oneOf": s.OneOf, "anyOf": s.AnyOf, "allOf": s.AllOf} {
		for i, sub := range list {
			w.schema(fmt.Sprintf("%s/%s/%d", at, kw, i), sub)
		}
	}
	if s.Not != nil {
		w.schema(at+"/not", s.Not)
	}
}
