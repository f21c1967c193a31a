package openapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/stretchr/testify/require"
)

// rideBodyByHuma is rideCreateBody as Huma validates a body by default:
// the same fields and bounds, decoded twice.
type rideBodyByHuma struct {
	OriginLat float64 `json:"origin_lat" minimum:"-90" maximum:"90"`
	OriginLon float64 `json:"origin_lon" minimum:"-180" maximum:"180"`
	TargetLat float64 `json:"target_lat" minimum:"-90" maximum:"90"`
	TargetLon float64 `json:"target_lon" minimum:"-180" maximum:"180"`
}

// rideBodyAPIs serves the same operation twice: /huma with Huma's own
// validation of the body, /self with rideCreateBody validating itself as
// POST /rides does. Each answers 200 with the coordinates it decoded.
func rideBodyAPIs() http.Handler {
	mux := http.NewServeMux()
	config := huma.DefaultConfig("ride bodies", "1")
	config.CreateHooks = nil
	config.Formats = jsonFormatsWithSelfDecoding(config.Formats)
	api := humago.New(mux, config)
	type out struct{ Body [4]float64 }
	huma.Register(api, huma.Operation{Method: http.MethodPost, Path: "/huma", MaxBodyBytes: maxBodyBytes},
		func(_ context.Context, in *struct{ Body rideBodyByHuma }) (*out, error) {
			return &out{Body: [4]float64{in.Body.OriginLat, in.Body.OriginLon, in.Body.TargetLat, in.Body.TargetLon}}, nil
		})
	huma.Register(api, huma.Operation{Method: http.MethodPost, Path: "/self", MaxBodyBytes: maxBodyBytes, SkipValidateBody: true},
		func(_ context.Context, in *struct{ Body rideCreateBody }) (*out, error) {
			p := in.Body.params()
			return &out{Body: [4]float64{p.OriginLat, p.OriginLon, p.TargetLat, p.TargetLon}}, nil
		})
	return mux
}

func postBody(h http.Handler, path, contentType, body string) (int, map[string]any) {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		got = map[string]any{"raw": rec.Body.String()}
	}
	return rec.Code, got
}

// TestRideBodyAnswersAsHuma: a ride's body decoded and validated in one
// pass gets, for good and bad input alike, the answer Huma's validation
// gives: the same status, the same problem with each field at fault named,
// the same coordinates.
func TestRideBodyAnswersAsHuma(t *testing.T) {
	t.Parallel()
	h := rideBodyAPIs()
	for _, c := range []struct{ name, contentType, body string }{
		{"valid", "application/json", `{"origin_lat":37.7749,"origin_lon":-122.4194,"target_lat":37.8044,"target_lon":-122.2712}`},
		{"valid, other order and spaces", "application/json", " {\"target_lon\": 4, \"origin_lon\":2 ,\"target_lat\":3,\n\"origin_lat\":-1e1} "},
		{"bounds included", "application/json", `{"origin_lat":-90,"origin_lon":180,"target_lat":90,"target_lon":-180}`},
		{"charset", "application/json; charset=utf-8", `{"origin_lat":1,"origin_lon":2,"target_lat":3,"target_lon":4}`},
		{"+json", "application/merge-patch+json", `{"origin_lat":1,"origin_lon":2,"target_lat":3,"target_lon":4}`},
		{"escaped key", "application/json", `{"origin\u005flat":1,"origin_lon":2,"target_lat":3,"target_lon":4}`},
		{"duplicate key", "application/json", `{"origin_lat":1,"origin_lat":91,"origin_lon":2,"target_lat":3,"target_lon":4}`},
		{"duplicate key, last valid", "application/json", `{"origin_lat":91,"origin_lat":1,"origin_lon":2,"target_lat":3,"target_lon":4}`},
		{"truncated", "application/json", `{"origin_lat":`},
		{"NaN", "application/json", `{"origin_lat":NaN,"origin_lon":0,"target_lat":0,"target_lon":0}`},
		{"trailing data", "application/json", `{"origin_lat":1,"origin_lon":2,"target_lat":3,"target_lon":4} {}`},
		{"number too large", "application/json", `{"origin_lat":1e400,"origin_lon":2,"target_lat":3,"target_lon":4}`},
		{"string", "application/json", `{"origin_lat":"1","origin_lon":0,"target_lat":0,"target_lon":0}`},
		{"null", "application/json", `{"origin_lat":null,"origin_lon":0,"target_lat":0,"target_lon":0}`},
		{"object", "application/json", `{"origin_lat":{},"origin_lon":0,"target_lat":0,"target_lon":0}`},
		{"out of range", "application/json", `{"origin_lat":0,"origin_lon":180.01,"target_lat":0,"target_lon":0}`},
		{"two out of range", "application/json", `{"origin_lat":-90.5,"origin_lon":180.01,"target_lat":0,"target_lon":0}`},
		{"missing", "application/json", `{"origin_lat":0,"origin_lon":0,"target_lat":0}`},
		{"unknown field", "application/json", `{"origin_lat":1,"origin_lon":2,"target_lat":3,"target_lon":4,"tip":5}`},
		{"key in capitals", "application/json", `{"ORIGIN_LAT":1,"origin_lon":2,"target_lat":3,"target_lon":4}`},
		{"array", "application/json", `[1,2,3,4]`},
		{"null body", "application/json", `null`},
		{"empty object", "application/json", `{}`},
		{"text/plain", "text/plain", `{"origin_lat":1,"origin_lon":2,"target_lat":3,"target_lon":4}`},
		{"too large", "application/json", `{"origin_lat":1,"origin_lon":2,"target_lat":3,"target_lon":4,"pad":"` + strings.Repeat("x", maxBodyBytes) + `"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantStatus, want := postBody(h, "/huma", c.contentType, c.body)
			gotStatus, got := postBody(h, "/self", c.contentType, c.body)
			require.Equal(t, wantStatus, gotStatus, "%v", got)
			require.Equal(t, want, got)
		})
	}
}

// BenchmarkRideBody compares the two ways of decoding a ride's body, through
// Huma's handler: validated by Huma (a decode into a map, the schema's
// checks, a decode into the struct) and validating itself in one pass.
func BenchmarkRideBody(b *testing.B) {
	h := rideBodyAPIs()
	body := `{"origin_lat":37.7749,"origin_lon":-122.4194,"target_lat":37.8044,"target_lon":-122.2712}`
	for _, path := range []string{"/huma", "/self"} {
		b.Run(path[1:], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if status, got := postBody(h, path, "application/json", body); status != http.StatusOK {
					b.Fatal(status, got)
				}
			}
		})
	}
}
