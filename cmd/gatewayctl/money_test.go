package main

import "testing"

func TestParseUSD(t *testing.T) {
	for in, want := range map[string]int64{
		"0":            0,
		"10":           10_000_000_000,
		"$10":          10_000_000_000,
		"0.5":          500_000_000,
		".5":           500_000_000,
		"12.345678901": 12_345_678_901,
		"1.":           1_000_000_000,
		"-2.25":        -2_250_000_000,
		" 3 ":          3_000_000_000,
	} {
		got, err := parseUSD(in)
		if err != nil || got != want {
			t.Errorf("parseUSD(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", ".", "abc", "1.2.3", "1e3", "0.0000000001", "99999999999999999999", "1,5"} {
		if got, err := parseUSD(in); err == nil {
			t.Errorf("parseUSD(%q) = %d, want an error", in, got)
		}
	}
}

func TestFormatUSD(t *testing.T) {
	for in, want := range map[int64]string{
		0:              "0.00",
		1_500_000_000:  "1.50",
		1234:           "0.000001234",
		12_345_678_901: "12.345678901",
		-2_250_000_000: "-2.25",
	} {
		if got := formatUSD(in); got != want {
			t.Errorf("formatUSD(%d) = %q, want %q", in, got, want)
		}
	}
}
