package openapi

import (
	"encoding/json"
	"net/http"
	"reflect"
	"sync"

	"github.com/danielgtaylor/huma/v2"
)

// selfDecodingBody is a request body that decodes and validates itself in
// one pass, for an operation registered with SkipValidateBody: Huma would
// otherwise decode every body twice, into a map to validate it against the
// schema, then into the struct. decodeBody never fails: what it finds wrong
// it keeps, and the body's Resolve reports it, with Huma's own details
// (see bodyProblems), so the answer to bad input is the one Huma gives.
type selfDecodingBody interface {
	decodeBody(data []byte)
}

// jsonFormatsWithSelfDecoding returns formats with their JSON formats
// handing a selfDecodingBody its bytes, and every other value to the
// format's own Unmarshal. formats is not modified (Huma's defaults are
// shared).
func jsonFormatsWithSelfDecoding(formats map[string]huma.Format) map[string]huma.Format {
	out := make(map[string]huma.Format, len(formats))
	for name, f := range formats {
		if name == "application/json" || name == "json" {
			next := f.Unmarshal
			f.Unmarshal = func(data []byte, v any) error {
				if b, ok := v.(selfDecodingBody); ok {
					b.decodeBody(data)
					return nil
				}
				return next(data, v)
			}
		}
		out[name] = f
	}
	return out
}

// statusDetail is an error detail that sets the answer's status (Huma
// answers 422 to bad input unless an error says otherwise): 400 for a body
// that is not JSON, as Huma answers.
type statusDetail struct {
	detail *huma.ErrorDetail
	status int
}

// Error describes the problem.
func (d statusDetail) Error() string { return d.detail.Error() }

// ErrorDetail is the problem's detail in the answer.
func (d statusDetail) ErrorDetail() *huma.ErrorDetail { return d.detail }

// GetStatus is the status of the answer.
func (d statusDetail) GetStatus() int { return d.status }

// bodyProblems validates data, a body the fast path refused, the way Huma
// validates a body: parsed into a generic value (400 if that fails), then
// checked against the schema of t, each problem named by its location
// (body.origin_lat). It returns nil when the body is valid.
func bodyProblems(t reflect.Type, data []byte) []error {
	var parsed any
	if err := json.Unmarshal(data, &parsed); err != nil {
		return []error{statusDetail{&huma.ErrorDetail{Location: "body", Message: err.Error(), Value: string(data)}, http.StatusBadRequest}}
	}
	reg, schema := bodySchema(t)
	pb := huma.NewPathBuffer(make([]byte, 0, 64), 0)
	pb.Push("body")
	res := &huma.ValidateResult{}
	huma.Validate(reg, schema, pb, huma.ModeWriteToServer, parsed, res)
	return res.Errors
}

type schemaOf struct {
	reg    huma.Registry
	schema *huma.Schema
}

// bodySchemas holds, per body type, its schema in a registry of its own,
// built on first use: the same schema Huma builds for the operation.
var bodySchemas sync.Map // reflect.Type → schemaOf

func bodySchema(t reflect.Type) (huma.Registry, *huma.Schema) {
	if s, ok := bodySchemas.Load(t); ok {
		return s.(schemaOf).reg, s.(schemaOf).schema
	}
	reg := huma.NewMapRegistry("#/components/schemas/", huma.DefaultSchemaNamer)
	s := schemaOf{reg: reg, schema: reg.Schema(t, true, "")}
	actual, _ := bodySchemas.LoadOrStore(t, s)
	return actual.(schemaOf).reg, actual.(schemaOf).schema
}
