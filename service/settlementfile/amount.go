package settlementfile

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// zeroDecimal are the currencies that Stripe documents as having no minor
// unit: an amount of them is written and stored as a whole number.
var zeroDecimal = map[string]bool{
	"bif": true, "clp": true, "djf": true, "gnf": true, "jpy": true, "kmf": true,
	"krw": true, "mga": true, "pyg": true, "rwf": true, "ugx": true, "vnd": true,
	"vuv": true, "xaf": true, "xof": true, "xpf": true,
}

// Decimals is how many digits of a currency's amounts follow the decimal
// point in the report: 0 for zero-decimal currencies, 2 otherwise.
func Decimals(currency string) int {
	if zeroDecimal[currency] {
		return 0
	}
	return 2
}

// ParseAmount reads a decimal amount of the report ("12.34", "-0.50",
// "1500" for a zero-decimal currency) into minor units. The fraction, when
// present, must have exactly Decimals(currency) digits.
func ParseAmount(s, currency string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty amount")
	}
	neg := strings.HasPrefix(s, "-")
	digits := strings.TrimPrefix(s, "-")
	whole, frac, hasFrac := strings.Cut(digits, ".")
	dec := Decimals(currency)
	if hasFrac && len(frac) != dec || dec == 0 && hasFrac {
		return 0, fmt.Errorf("%q must have %d decimals in %s", s, dec, currency)
	}
	if !allDigits(whole) || !allDigits(frac) && hasFrac || len(whole) > 15 {
		return 0, fmt.Errorf("%q is not a decimal amount", s)
	}
	if !hasFrac {
		frac = strings.Repeat("0", dec)
	}
	v, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a decimal amount", s)
	}
	if neg {
		v = -v
	}
	return v, nil
}

// FormatAmount writes minor units as the report does.
func FormatAmount(cents int64, currency string) string {
	dec := Decimals(currency)
	if dec == 0 {
		return strconv.FormatInt(cents, 10)
	}
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	return fmt.Sprintf("%s%d.%02d", sign, cents/100, cents%100)
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
