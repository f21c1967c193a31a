package receipts

import (
	"errors"
	"strings"
)

// errNoMailer is returned by receipt sends on a service built without a
// Mailer: the job fails and is retried, so receipts are delayed, not lost.
var errNoMailer = errors.New("receipts: no Mailer configured")

// mailDomain is the domain of a From address, for Message-IDs.
func mailDomain(from string) string {
	addr := from
	if i := strings.LastIndexByte(addr, '<'); i >= 0 {
		addr = strings.TrimSuffix(addr[i+1:], ">")
	}
	if i := strings.LastIndexByte(addr, '@'); i >= 0 && i+1 < len(addr) {
		return addr[i+1:]
	}
	return "atomicrides.localhost"
}
