package openapi

import (
	"slices"

	"github.com/danielgtaylor/huma/v2"
)

// strictSpec makes the registered spec one that strict validators of
// OpenAPI 3.1 and JSON Schema 2020-12 read as the service means it:
//
//   - a nullable enum lists null among its values, since an enum is a
//     closed list whatever the type says (extra_status is null until a
//     trip's completion decides it);
//   - patternDescription, Huma's own keyword, leaves the spec: it is no
//     keyword of JSON Schema, and validators of the document reject it
//     ("extra sibling fields"). Huma computed the validation messages that
//     quote it when the schema was made, and the description says it in
//     prose already.
func strictSpec(oapi *huma.OpenAPI) {
	seen := map[*huma.Schema]bool{}
	for _, s := range oapi.Components.Schemas.Map() {
		strictSchema(s, seen)
	}
	for _, item := range oapi.Paths {
		for _, op := range []*huma.Operation{item.Get, item.Put, item.Post, item.Delete, item.Patch, item.Head} {
			if op == nil {
				continue
			}
			for _, p := range op.Parameters {
				strictSchema(p.Schema, seen)
			}
			if op.RequestBody != nil {
				for _, mt := range op.RequestBody.Content {
					strictSchema(mt.Schema, seen)
				}
			}
			for _, r := range op.Responses {
				for _, mt := range r.Content {
					strictSchema(mt.Schema, seen)
				}
				for _, h := range r.Headers {
					strictSchema(h.Schema, seen)
				}
			}
		}
	}
}

func strictSchema(s *huma.Schema, seen map[*huma.Schema]bool) {
	if s == nil || seen[s] {
		return
	}
	seen[s] = true
	s.PatternDescription = ""
	if s.Nullable && len(s.Enum) > 0 && !slices.Contains(s.Enum, nil) {
		s.Enum = append(s.Enum, nil)
	}
	strictSchema(s.Items, seen)
	if a, ok := s.AdditionalProperties.(*huma.Schema); ok {
		strictSchema(a, seen)
	}
	for _, p := range s.Properties {
		strictSchema(p, seen)
	}
	for _, list := range [][]*huma.Schema{s.OneOf, s.AnyOf, s.AllOf} {
		for _, sub := range list {
			strictSchema(sub, seen)
		}
	}
	strictSchema(s.Not, seen)
}
