package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

const nanoPerUSD = 1_000_000_000

// parseUSD converts a decimal USD amount as people type it ("10", "0.5",
// "12.345678901") to nano-USD exactly, without going through a float.
func parseUSD(s string) (int64, error) {
	s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "$"))
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || !digits(whole) || !digits(frac) {
		return 0, fmt.Errorf("%q is not a USD amount", s)
	}
	if len(frac) > 9 {
		return 0, fmt.Errorf("%q: more than 9 decimal places (nano-USD)", s)
	}
	var w int64
	if whole != "" {
		var err error
		if w, err = strconv.ParseInt(whole, 10, 64); err != nil || w > (1<<63-1)/nanoPerUSD-1 {
			return 0, fmt.Errorf("%q is too large", s)
		}
	}
	f, _ := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
	n := w*nanoPerUSD + f
	if neg {
		n = -n
	}
	return n, nil
}

func digits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// formatUSD shows nano-USD as dollars with at least two decimals and no
// trailing zeros beyond them: 1.5e9 is "1.50", 1234 is "0.000001234".
func formatUSD(nano int64) string {
	sign := ""
	u := uint64(nano)
	if nano < 0 {
		sign, u = "-", uint64(-nano)
	}
	frac := fmt.Sprintf("%09d", u%nanoPerUSD)
	frac = strings.TrimRight(frac, "0")
	for len(frac) < 2 {
		frac += "0"
	}
	return fmt.Sprintf("%s%d.%s", sign, u/nanoPerUSD, frac)
}

// usdOrNano reads a pair of flags that give one amount either way; exactly
// one of them may be set. ok is false when neither is.
func usdOrNano(usd string, usdSet bool, nano int64, nanoSet bool) (amount int64, ok bool, err error) {
	switch {
	case usdSet && nanoSet:
		return 0, false, errors.New("give the amount in USD or in nano-USD, not both")
	case usdSet:
		n, err := parseUSD(usd)
		return n, err == nil, err
	case nanoSet:
		return nano, true, nil
	}
	return 0, false, nil
}
