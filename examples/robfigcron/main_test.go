package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRun(t *testing.T) {
	addr, prefix := testRedis(t)
	var out bytes.Buffer
	if code := run(t.Context(), &out, addr, prefix); code != 0 {
		t.Fatalf("got exit code %d, want 0; output:\n%s", code, &out)
	}
	for _, want := range []string{
		"leads (epoch 1)\n",
		"leads (epoch 2) ",
		"writes late with epoch 1: refused",
		"skipped ",
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

// TestLeavesNothingBehind runs the program on the real Redis named by FENCING_REDIS_ADDR and
// checks that it left no key under its prefix.
func TestLeavesNothingBehind(t *testing.T) {
	c, url := realRedis(t)
	prefix := "robfigcron-example:" + t.Name() + ":"
	var out bytes.Buffer
	if code := run(t.Context(), &out, url, prefix); code != 0 {
		t.Fatalf("got exit code %d, want 0; output:\n%s", code, &out)
	}
	left, err := lingering(t.Context(), c, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("%d keys left behind, such as %q", len(left), left[:min(len(left), 10)])
	}
}
