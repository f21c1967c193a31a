package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"

	"github.com/danielgtaylor/huma/v2"

	"github.com/atomicrides/atomicrides/service"
)

// rideBodyFields is rideCreateBody's wire form: decoded into as Huma would,
// once the body is known valid.
type rideBodyFields struct {
	OriginLat float64 `json:"origin_lat"`
	OriginLon float64 `json:"origin_lon"`
	TargetLat float64 `json:"target_lat"`
	TargetLon float64 `json:"target_lon"`
}

// decodeBody decodes a ride's body in one pass when it is what nearly every
// client sends: one JSON object holding the four coordinates, each once,
// each a number within the schema's bounds, and nothing else. Anything else
// takes Huma's path (bodyProblems), so that bad input gets the answer Huma
// gives: 400 for what is not JSON, 422 naming each field at fault.
func (b *rideCreateBody) decodeBody(data []byte) {
	b.decoded = true
	if b.decodeFast(data) {
		return
	}
	*b = rideCreateBody{decoded: true}
	if b.problems = bodyProblems(reflect.TypeFor[rideCreateBody](), data); len(b.problems) > 0 {
		return
	}
	var f rideBodyFields
	if err := json.Unmarshal(data, &f); err != nil {
		b.problems = []error{&huma.ErrorDetail{Location: "body", Message: err.Error(), Value: string(data)}}
		return
	}
	b.OriginLat, b.OriginLon, b.TargetLat, b.TargetLon = f.OriginLat, f.OriginLon, f.TargetLat, f.TargetLon
}

// decodeFast decodes data if it is exactly one object of the four
// coordinates in range, each once, keys without escapes; it reports whether
// it did. It allocates nothing: it reads the bytes itself, JSON's grammar for
// what it accepts, and leaves everything else to the slow path.
func (b *rideCreateBody) decodeFast(data []byte) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	var seen uint8
	for {
		i = skipSpace(data, i+1)
		if i >= len(data) || data[i] != '"' {
			return false
		}
		end := bytes.IndexByte(data[i+1:], '"')
		if end < 0 {
			return false
		}
		key := data[i+1 : i+1+end]
		var dst *float64
		var bit uint8
		var limit float64
		switch string(key) {
		case "origin_lat":
			dst, bit, limit = &b.OriginLat, 1, 90
		case "origin_lon":
			dst, bit, limit = &b.OriginLon, 2, 180
		case "target_lat":
			dst, bit, limit = &b.TargetLat, 4, 90
		case "target_lon":
			dst, bit, limit = &b.TargetLon, 8, 180
		default:
			return false // an escape, another key: the slow path tells
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		i = skipSpace(data, i+1+end+1)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		i = skipSpace(data, i+1)
		n := jsonNumberLen(data[i:])
		if n == 0 {
			return false
		}
		v, err := strconv.ParseFloat(string(data[i:i+n]), 64)
		if err != nil || v < -limit || v > limit {
			return false
		}
		*dst = v
		i = skipSpace(data, i+n)
		if i >= len(data) {
			return false
		}
		if data[i] == '}' {
			break
		}
		if data[i] != ',' {
			return false
		}
	}
	return skipSpace(data, i+1) == len(data) && seen == 15
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// jsonNumberLen is the length of the JSON number at the start of data
// (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?), 0 if none starts there.
func jsonNumberLen(data []byte) int {
	i := 0
	digits := func() int {
		start := i
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
		}
		return i - start
	}
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case digits() == 0:
		return 0
	}
	if i < len(data) && data[i] == '.' {
		i++
		if digits() == 0 {
			return 0
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if digits() == 0 {
			return 0
		}
	}
	return i
}

// Resolve reports what decodeBody found wrong, and 415 when the body was not
// handed to decodeBody at all: it was sent as another media type than JSON.
// Its detail is the one Huma reported then (the two are merged).
func (b *rideCreateBody) Resolve(ctx huma.Context, _ *huma.PathBuffer) []error {
	if !b.decoded {
		msg := fmt.Sprintf("%v: %s", huma.ErrUnknownContentType, ctx.Header("Content-Type"))
		return []error{statusDetail{&huma.ErrorDetail{Location: "body", Message: msg}, http.StatusUnsupportedMediaType}}
	}
	return b.problems
}

// params is the body as the service takes it.
func (b *rideCreateBody) params() service.RideCreateParams {
	return service.RideCreateParams{OriginLat: b.OriginLat, OriginLon: b.OriginLon, TargetLat: b.TargetLat, TargetLon: b.TargetLon}
}
