package main

import (
	"strings"
	"testing"

	"github.com/modelgateway/gateway/internal/config"
)

// gateway serve has no in-memory store: without a Redis URL it refuses to
// start, saying what to set.
func TestOpenStoreNeedsRedisURL(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	_, _, err := openStore(&config.Config{})
	if err == nil || !strings.Contains(err.Error(), "REDIS_URL") || !strings.Contains(err.Error(), "gateway-local") {
		t.Fatalf("openStore without a URL: %v", err)
	}
}
