package main

import (
	"errors"
	"slices"
	"strconv"
	"testing"
)

// pages serves 0..9 in pages of size, tokens being the next index.
func pages(t *testing.T, calls *[]string) func(size int32, token string) ([]int, string, error) {
	return func(size int32, token string) ([]int, string, error) {
		*calls = append(*calls, token)
		start := 0
		if token != "" {
			start, _ = strconv.Atoi(token)
		}
		end := min(start+int(size), 10)
		var out []int
		for i := start; i < end; i++ {
			out = append(out, i)
		}
		next := ""
		if end < 10 {
			next = strconv.Itoa(end)
		}
		return out, next, nil
	}
}

func TestReadPages(t *testing.T) {
	var calls []string
	got, next, err := read(pageFlags{size: 4}, pages(t, &calls))
	if err != nil || !slices.Equal(got, []int{0, 1, 2, 3}) || next != "4" || len(calls) != 1 {
		t.Fatalf("one page: %v next %q err %v calls %v", got, next, err, calls)
	}
	calls = nil
	got, next, err = read(pageFlags{size: 4, token: next}, pages(t, &calls))
	if err != nil || !slices.Equal(got, []int{4, 5, 6, 7}) || next != "8" {
		t.Fatalf("continued page: %v next %q", got, next)
	}
	calls = nil
	got, next, err = read(pageFlags{size: 4, all: true}, pages(t, &calls))
	if err != nil || len(got) != 10 || next != "" || !slices.Equal(calls, []string{"", "4", "8"}) {
		t.Fatalf("--all: %v next %q calls %v", got, next, calls)
	}
	boom := errors.New("unavailable")
	if _, _, err := read(pageFlags{size: 4, all: true}, func(int32, string) ([]int, string, error) { return nil, "", boom }); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
}
