package service

import (
	"net/mail"
	"strings"
	"unicode"
)

// Bounds of an email address, in bytes (it is ASCII).
const (
	EmailMinLength = 3
	EmailMaxLength = 255
)

// NormalizeEmail validates a rider's email address and returns the form the
// service stores and compares: lower-cased, so that Alice@Example.COM and
// alice@example.com are one rider (mailboxes are case-insensitive in
// practice, whatever RFC 5321 allows for the local part).
//
// The address must be a plain addr-spec (no display name, no comment, no
// quoting that changes it) of 3 to 255 characters. Control and formatting
// characters (Unicode Cc and Cf, such as U+202E RIGHT-TO-LEFT OVERRIDE) are
// refused, and so is any other non-ASCII character: the service's SMTP client
// does not use the SMTPUTF8 extension, so it could not deliver a receipt to
// such an address. The domain must be a name, not an address literal
// (rider@[192.0.2.1]): a receipt is delivered where the domain's DNS says,
// never to an address a client picked, such as one inside our network;
// and it must be a host name (isHostname): rider@-example.com and
// rider@example_1.com name no host a receipt could be delivered to.
// Every error is CodeInvalid on path.email; the spec's pattern for
// path.email states the same rule.
func NormalizeEmail(email string) (string, error) {
	const field = "path.email"
	for _, r := range email {
		if unicode.In(r, unicode.Cc, unicode.Cf) {
			return "", Invalid(field, "must not contain control or formatting characters (found U+%04X)", r)
		}
	}
	for _, r := range email {
		if r > unicode.MaxASCII {
			return "", Invalid(field, "must be ASCII: addresses that need SMTPUTF8 (found U+%04X) cannot be delivered", r)
		}
	}
	if len(email) < EmailMinLength || len(email) > EmailMaxLength {
		return "", Invalid(field, "must be an email address of 3 to 255 characters")
	}
	addr, err := mail.ParseAddress(email)
	if err != nil || addr.Address != email || addr.Name != "" || !strings.Contains(email, "@") {
		return "", Invalid(field, "must be a plain email address like rider@example.com")
	}
	if strings.HasSuffix(email, "]") {
		return "", Invalid(field, "must name a domain, not an address in brackets")
	}
	if !isHostname(email[strings.LastIndexByte(email, '@')+1:]) {
		return "", Invalid(field, "must name a domain of dot-separated labels of 1 to 63 letters, digits and hyphens, none starting or ending with a hyphen")
	}
	return strings.ToLower(email), nil
}

// isHostname reports whether domain is a host name as DNS and mail
// servers take it (RFC 1123 section 2.1, RFC 5321 section 4.1.2): labels of
// 1 to 63 ASCII letters, digits and hyphens, separated by dots, none
// starting or ending with a hyphen. An internationalized domain is taken in
// its ASCII form (xn--…), as the service's SMTP client sends it. The
// address as a whole is at most EmailMaxLength bytes, which keeps the
// domain within DNS's 253.
func isHostname(domain string) bool {
	for label := range strings.SplitSeq(domain, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
