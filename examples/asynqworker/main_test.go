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
	if addr := os.Getenv("FENCING_REDIS_ADDR"); addr != "" {
		return "redis://" + addr + "/9"
	}
	return ""
}

func TestRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out bytes.Buffer
	if code := run(t.Context(), &out, options{redisAddr: redisAddr()}); code != 0 {
		t.Fatalf("got exit code %d, want 0; output:\n%s", code, &out)
	}
	for _, want := range []string{
		"at most 1 deposit(s) ran at once for one account",
		": rejected\n",
		"alice  72 (want  72)",
		"stale writes accepted: 0\n",
		"took over (epoch 2)",
		" processed, 0 of them twice\n",
		"OK\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, &out)
		}
	}
}

// TestRunUnfenced checks that the program notices a stale write when the store does not
// check tokens, and exits 1.
func TestRunUnfenced(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out bytes.Buffer
	if code := run(t.Context(), &out, options{redisAddr: redisAddr(), unfenced: true}); code != 1 {
		t.Fatalf("got exit code %d, want 1; output:\n%s", code, &out)
	}
	for _, want := range []string{"ACCEPTED, a stale write", "stale writes accepted: 1\n", "FAIL:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, &out)
		}
	}
}

// TestLeavesNothingBehind runs the program on a database of its own of the real Redis named
// by FENCING_REDIS_ADDR and checks that no key is left: no lock, no fence counter, no Asynq
// queue or statistics.
func TestLeavesNothingBehind(t *testing.T) {
	defer goleak.VerifyNone(t)
	_, addr := dedicated(t, 13)
	var out bytes.Buffer
	if code := run(t.Context(), &out, options{redisAddr: addr}); code != 0 {
		t.Fatalf("got exit code %d, want 0; output:\n%s", code, &out)
	}
}
