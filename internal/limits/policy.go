package limits

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Policy is a budget: Quota requests per Window, refilled continuously
// (GCRA), so that a full bucket allows Quota requests at once and then one
// every Window/Quota. The zero Policy is off: it limits nothing.
type Policy struct {
	// Name names the policy in the RateLimit and RateLimit-Policy fields
	// and in the metrics.
	Name string
	// Quota is how many requests the policy allows per Window.
	Quota int
	// Window is the time in which Quota requests are refilled.
	Window time.Duration
}

// Off reports whether the policy limits nothing.
func (p Policy) Off() bool { return p.Quota <= 0 || p.Window <= 0 }

// Interval is the time in which one request is refilled.
func (p Policy) Interval() time.Duration { return p.Window / time.Duration(p.Quota) }

// String is the policy in the form ParsePolicy reads.
func (p Policy) String() string {
	if p.Off() {
		return "off"
	}
	return strconv.Itoa(p.Quota) + "/" + p.Window.String()
}

// Header is the policy's item of the RateLimit-Policy field
// (draft-ietf-httpapi-ratelimit-headers): its name, quota and window in
// seconds.
func (p Policy) Header() string {
	return fmt.Sprintf("%q;q=%d;w=%d", p.Name, p.Quota, ceilSeconds(p.Window))
}

// Defaults of the budgets: what a deployment may keep. A rider's
// integration that books a ride per user action never comes near them; a
// runaway loop or a leaked key meets them within seconds.
var (
	// DefaultWrites is the budget of a rider's writes (bookings, refunds):
	// a burst of 50, then 5 a second.
	DefaultWrites = Policy{Name: "writes", Quota: 50, Window: 10 * time.Second}
	// DefaultReads is the budget of a rider's reads: a burst of 200, then
	// 20 a second.
	DefaultReads = Policy{Name: "reads", Quota: 200, Window: 10 * time.Second}
	// DefaultAuthFailures is the budget of failed authentications per
	// client address: 20, refilled one every 30 seconds. The 21st failure
	// in a row is answered 429, and so is every request from the address
	// that presents credentials until the budget refills.
	DefaultAuthFailures = Policy{Name: "auth-failures", Quota: 20, Window: 10 * time.Minute}
	// DefaultOperator is the budget of the operator credential's requests
	// (users and their keys): an import script's burst of 1000, then 100 a
	// second.
	DefaultOperator = Policy{Name: "operator", Quota: 1000, Window: 10 * time.Second}
	// DefaultDispatch is the budget of the dispatch side's requests
	// (completing and cancelling trips): a burst of 1000, then 100 a
	// second.
	DefaultDispatch = Policy{Name: "dispatch", Quota: 1000, Window: 10 * time.Second}
)

// ParsePolicy reads a budget written QUOTA/WINDOW (e.g. 50/10s: 50
// requests per 10 seconds), or "off". The window is a Go duration of at
// least one second; the quota is at least 1 and at most a million.
func ParsePolicy(name, s string) (Policy, error) {
	if s == "off" {
		return Policy{Name: name}, nil
	}
	q, w, ok := strings.Cut(s, "/")
	if !ok {
		return Policy{}, fmt.Errorf("%q: want QUOTA/WINDOW, e.g. 50/10s, or off", s)
	}
	quota, err := strconv.Atoi(q)
	if err != nil || quota < 1 || quota > 1_000_000 {
		return Policy{}, fmt.Errorf("%q: the quota %q is not a whole number from 1 to 1000000", s, q)
	}
	window, err := time.ParseDuration(w)
	if err != nil || window < time.Second || window > 24*time.Hour {
		return Policy{}, fmt.Errorf("%q: the window %q is not a duration from 1s to 24h", s, w)
	}
	return Policy{Name: name, Quota: quota, Window: window}, nil
}

// ceilSeconds is d in whole seconds, rounded up, at least 1: the form of
// Retry-After and of the fields' windows.
func ceilSeconds(d time.Duration) int {
	s := int(math.Ceil(d.Seconds()))
	return max(s, 1)
}

// Seconds is d in whole seconds, rounded up, at least 1 (Retry-After).
func Seconds(d time.Duration) int { return ceilSeconds(d) }
