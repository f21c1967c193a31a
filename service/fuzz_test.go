package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/atomicrides/atomicrides/service/idem"
)

// These fuzz targets run their seed corpus (f.Add and testdata/fuzz) with
// every go test; go test -fuzz=FuzzX ./service explores further.

// quoteSFString formats s as an RFC 8941 sf-string.
func quoteSFString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// FuzzParseIdempotencyKey: the parser never panics, accepts exactly the keys
// of the contract, answers every refusal as a 400 on the header, and a key
// it accepts is parsed back from its bare and its quoted form.
func FuzzParseIdempotencyKey(f *testing.F) {
	for _, seed := range []string{
		"", "short", "7d1c9f1e-2b6a-4c1d-9a3e-5f0e2a8b4c61", `"7d1c9f1e-2b6a-4c1d-9a3e-5f0e2a8b4c61"`,
		`"with \"escaped\" quote and \\ backslash"`, `"unterminated-quoted-key-000000`, `"bad \x escape in a quoted key"`,
		"key with spaces inside it, long enough", "non-ascii-ключ-0000000000000000", strings.Repeat("k", 255), strings.Repeat("k", 256),
		`"` + strings.Repeat("q", 255) + `"`, `""`, `"`, "\"a\"b\"-twenty-characters-long\"", "tab\tinside-the-key-000000000",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, header string) {
		key, err := ParseIdempotencyKey(header)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeKeyInvalid || e.Field != "header.Idempotency-Key" {
				t.Fatalf("ParseIdempotencyKey(%q): error %v is not a 400 on the header", header, err)
			}
			if header != "" && header[0] != '"' && validKey(header) {
				t.Fatalf("ParseIdempotencyKey(%q) refused a valid bare key: %v", header, err)
			}
			return
		}
		if !validKey(key) {
			t.Fatalf("ParseIdempotencyKey(%q) = %q, outside the contract", header, key)
		}
		if header[0] != '"' && key != header {
			t.Fatalf("bare key %q parsed as %q", header, key)
		}
		quoted, err := ParseIdempotencyKey(quoteSFString(key))
		if err != nil || quoted != key {
			t.Fatalf("quoted form of %q parsed as %q, %v", key, quoted, err)
		}
		if key[0] != '"' {
			if bare, err := ParseIdempotencyKey(key); err != nil || bare != key {
				t.Fatalf("bare form of %q parsed as %q, %v", key, bare, err)
			}
		}
	})
}

// validKey is the contract's definition of a key, written independently of
// the parser.
func validKey(k string) bool {
	if len(k) < IdempotencyKeyMinLength || len(k) > IdempotencyKeyMaxLength {
		return false
	}
	for _, r := range k {
		if r < '!' || r > '~' {
			return false
		}
	}
	return true
}

// rideBody writes p as a client might: its fields in the order perm gives,
// numbers in one of several notations, and whitespace ws between tokens.
func rideBody(p RideCreateParams, perm uint8, notation uint8, ws string) string {
	fields := []struct {
		name string
		v    float64
	}{{"origin_lat", p.OriginLat}, {"origin_lon", p.OriginLon}, {"target_lat", p.TargetLat}, {"target_lon", p.TargetLon}}
	// One of the 24 orders of four fields.
	n := int(perm) % 24
	for i := len(fields) - 1; i > 0; i-- {
		j := n % (i + 1)
		n /= i + 1
		fields[i], fields[j] = fields[j], fields[i]
	}
	var b strings.Builder
	b.WriteString(ws + "{" + ws)
	for i, fl := range fields {
		if i > 0 {
			b.WriteString(ws + "," + ws)
		}
		var num string
		switch (notation >> (2 * i)) & 3 {
		case 0:
			num = strconv.FormatFloat(fl.v, 'g', -1, 64)
		case 1:
			num = strconv.FormatFloat(fl.v, 'e', -1, 64)
		case 2:
			num = strconv.FormatFloat(fl.v, 'E', 20, 64) // more digits than needed
		default:
			num = strconv.FormatFloat(fl.v, 'f', -1, 64)
		}
		b.WriteString(strconv.Quote(fl.name) + ws + ":" + ws + num)
	}
	b.WriteString(ws + "}" + ws)
	return b.String()
}

// decodeRide decodes a body as the API does: strictly, unknown fields
// refused.
func decodeRide(body []byte) (RideCreateParams, error) {
	var p RideCreateParams
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(&p)
	return p, err
}

// FuzzRequestFingerprint: the stored form and fingerprint of a booking
// depend only on the values of its coordinates, not on how the client wrote
// them (field order, whitespace, number notation), so a retry of the same
// booking is always recognised; re-forming the stored form changes nothing
// (the completer drives a request from it); and different bookings differ.
func FuzzRequestFingerprint(f *testing.F) {
	f.Add(37.7749, -122.4194, 37.8044, -122.2712, uint8(0), uint8(0), "")
	f.Add(-90.0, 180.0, 90.0, -180.0, uint8(23), uint8(0xff), " \n\t")
	f.Add(0.0, 0.0, 0.0, 0.0, uint8(7), uint8(0x1b), "\r\n")
	f.Add(math.Copysign(0, -1), 0.0, -0.0, math.Copysign(0, -1), uint8(3), uint8(0x44), "") // -0 is 0
	f.Add(1e-300, 5e-324, 89.99999999999999, -179.9999999999, uint8(11), uint8(0xaa), "  ")
	f.Fuzz(func(t *testing.T, olat, olon, tlat, tlon float64, perm, notation uint8, ws string) {
		p := RideCreateParams{OriginLat: olat, OriginLon: olon, TargetLat: tlat, TargetLon: tlon}
		if p.Validate() != nil {
			return
		}
		if strings.Trim(ws, " \t\r\n") != "" {
			ws = " "
		}
		form := func(p RideCreateParams) (params, fp []byte) {
			t.Helper()
			params, fp, err := idem.Form(rideCreateRequest(1, "fuzz-key-00000000000000", p, nil))
			if err != nil {
				t.Fatalf("form of %+v: %v", p, err)
			}
			return params, fp
		}
		params, fp := form(p)

		body := rideBody(p, perm, notation, ws)
		decoded, err := decodeRide([]byte(body))
		if err != nil {
			t.Fatalf("decode %q: %v", body, err)
		}
		if dparams, dfp := form(decoded); !bytes.Equal(dfp, fp) {
			t.Fatalf("%q was stored as %s, the same booking written canonically as %s", body, dparams, params)
		}

		// Equal values, written as differently as floats allow (adding
		// zero turns -0 into 0): the same booking.
		same := RideCreateParams{OriginLat: olat + 0, OriginLon: olon + 0, TargetLat: tlat + 0, TargetLon: tlon + 0}
		if sparams, sfp := form(same); !bytes.Equal(sfp, fp) {
			t.Fatalf("equal coordinates, different fingerprints: %s and %s", params, sparams)
		}

		stored, err := decodeRide(params)
		if err != nil {
			t.Fatalf("stored params %s do not decode: %v", params, err)
		}
		if again, afp := form(stored); !bytes.Equal(again, params) || !bytes.Equal(afp, fp) {
			t.Fatalf("re-forming %s gave %s", params, again)
		}

		other := p
		other.TargetLon = math.Nextafter(p.TargetLon, 0)
		if other.TargetLon == p.TargetLon {
			other.TargetLon = math.Nextafter(p.TargetLon, 1)
		}
		if _, ofp := form(other); bytes.Equal(ofp, fp) {
			t.Fatalf("%+v and %+v share a fingerprint", p, other)
		}
		// Another path is another request.
		req := rideCreateRequest(1, "fuzz-key-00000000000000", p, nil)
		req.Path = "/rides/1/refund"
		if _, rfp, err := idem.Form(req); err != nil || bytes.Equal(rfp, fp) {
			t.Fatalf("the path is not in the fingerprint")
		}
	})
}

// FuzzNormalizeEmail: never panics; refuses with a 422 on path.email every
// address holding a control, formatting or non-ASCII character; what it
// accepts is a plain lower-cased ASCII address that normalises to itself,
// and the same address in upper case is the same rider.
func FuzzNormalizeEmail(f *testing.F) {
	for _, seed := range []string{
		"rider@example.com", "Alice@Example.COM", "a@b", "", "@", "a@", "@b.c", "not-an-email",
		"Name <a@example.com>", "a@example.com (comment)", `"quoted"@example.com`, `"a b"@example.com`,
		"alice\u202e@example.com", "bob\u200b@example.com", "bob\x07@example.com", "bob\x00@example.com",
		"b\u00f6b@example.com", "bob@\u4f8b\u3048.jp", "bob@[127.0.0.1]", "a.b+tag@sub.example.co.uk",
		strings.Repeat("a", 243) + "@example.com", strings.Repeat("a", 244) + "@example.com", "a@b@c", "\xff@example.com",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, email string) {
		got, err := NormalizeEmail(email)
		forbidden := false
		for _, r := range email {
			if r > unicode.MaxASCII || unicode.In(r, unicode.Cc, unicode.Cf) {
				forbidden = true
			}
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeInvalid || e.Field != "path.email" {
				t.Fatalf("NormalizeEmail(%q): %v is not a 422 on path.email", email, err)
			}
			return
		}
		if forbidden {
			t.Fatalf("NormalizeEmail(%q) accepted a control, formatting or non-ASCII character", email)
		}
		if got != strings.ToLower(email) {
			t.Fatalf("NormalizeEmail(%q) = %q, not the address lower-cased", email, got)
		}
		if len(got) < EmailMinLength || len(got) > EmailMaxLength || !strings.Contains(got, "@") {
			t.Fatalf("NormalizeEmail(%q) = %q, outside the contract", email, got)
		}
		if again, err := NormalizeEmail(got); err != nil || again != got {
			t.Fatalf("NormalizeEmail(%q) = %q, %v: not idempotent", got, again, err)
		}
		if upper, err := NormalizeEmail(strings.ToUpper(got)); err != nil || upper != got {
			t.Fatalf("NormalizeEmail(%q) = %q, %v: case makes another rider", strings.ToUpper(got), upper, err)
		}
	})
}

// FuzzRideParamsJSON: a ride's request form is byte for byte what
// encoding/json writes of its params, whatever the coordinates (the stored
// form and the fingerprint must not depend on the path that made them).
func FuzzRideParamsJSON(f *testing.F) {
	for _, seed := range [][4]float64{
		{37.7749, -122.4194, 37.8044, -122.2712}, {0, 0, 0, 0}, {90, -90, 180, -180},
		{1e-6, -1e-6, 9.99e-7, -1e-7}, {5e-324, -5e-324, 1e-300, 0.1},
		{1e21, -1e21, 1e20, 123456789012345680000}, {math.Copysign(0, -1), 1.5e-8, 33.333333333333336, -0.000001},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	f.Fuzz(func(t *testing.T, a, b, c, d float64) {
		p := RideCreateParams{OriginLat: a, OriginLon: b, TargetLat: c, TargetLon: d}
		want, err := json.Marshal(p)
		if err != nil {
			return // NaN and infinities are refused before a form is made
		}
		if got := p.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("AppendJSON(%v) = %s, encoding/json: %s", p, got, want)
		}
	})
}
