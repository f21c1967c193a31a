package service

import "strings"

// Bounds of a client's idempotency key.
const (
	IdempotencyKeyMinLength = 20
	IdempotencyKeyMaxLength = 255
)

// ParseIdempotencyKey validates the Idempotency-Key header: 20 to 255
// printable ASCII characters, bare or as a quoted structured-field string
// ("…", with \" and \\ escapes). It returns the key itself.
func ParseIdempotencyKey(header string) (string, error) {
	const field = "header.Idempotency-Key"
	if header == "" {
		return "", &Error{Code: CodeKeyInvalid, Field: field, Message: "the Idempotency-Key header is required"}
	}
	key := header
	if len(header) >= 2 && header[0] == '"' {
		var ok bool
		if key, ok = unquoteSFString(header); !ok {
			return "", &Error{Code: CodeKeyInvalid, Field: field, Message: "Idempotency-Key is not a valid quoted string"}
		}
	}
	if len(key) < IdempotencyKeyMinLength || len(key) > IdempotencyKeyMaxLength {
		return "", &Error{Code: CodeKeyInvalid, Field: field,
			Message: "Idempotency-Key must be 20 to 255 characters long"}
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return "", &Error{Code: CodeKeyInvalid, Field: field,
				Message: "Idempotency-Key must be printable ASCII without spaces"}
		}
	}
	return key, nil
}

// unquoteSFString decodes an RFC 8941 sf-string.
func unquoteSFString(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i >= len(s)-1 || (s[i] != '"' && s[i] != '\\') {
				return "", false
			}
			b.WriteByte(s[i])
		case c == '"':
			return "", false
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}
