package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// redisAddr returns the Redis the tests use: embedded miniredis unless FENCING_REDIS_ADDR
// names a real one, whose database 9 they then use, as the other tests do.
func redisAddr() string {
	if addr := os.Getenv(envAddr); addr != "" {
		return "redis://" + addr + "/9"
	}
	return ""
}

func TestRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out bytes.Buffer
	if code := run(t.Context(), &out, redisAddr()); code != 0 {
		t.Fatalf("got exit code %d, want 0; output:\n%s", code, &out)
	}
	for _, want := range []string{
		"leads (epoch 1)\n",
		"leads (epoch 2) ",
		"writes late with epoch 1: refused",
		"each tick ran once: true\n",
		"stale writes accepted: 0\n",
		"OK\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, &out)
		}
	}
	t.Logf("output:\n%s", &out)
}

// TestLeavesNothingBehind runs the program on a database of its own of the real Redis named
// by FENCING_REDIS_ADDR and checks that no key is left.
func TestLeavesNothingBehind(t *testing.T) {
	defer goleak.VerifyNone(t)
	_, addr := dedicated(t, 10)
	var out bytes.Buffer
	if code := run(t.Context(), &out, addr); code != 0 {
		t.Fatalf("got exit code %d, want 0; output:\n%s", code, &out)
	}
}
