package errorstest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no case leaves a goroutine running.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// prefixes are the prefixes with which fencekit's packages start the texts of their errors.
var prefixes = []string{
	"fencing: ", "fencingtest: ", "servercheck: ", "leader: ", "cronfence: ", "asynqfence: ",
	"fencemw: ", "store: ", "gormfence: ", "dashboard: ", "tracing: ", "asynqtrace: ",
	"echov5trace: ", "fencekit: ",
}

// violations returns how text breaks the rule, one message each, or none: every line (an
// errors.Join puts one error on each) starts with one fencekit package's prefix, the one of
// from when it is set, carries no other prefix and repeats no ": "-separated segment.
func violations(text, from string) []string {
	if text == "" {
		return []string{"the text is empty"}
	}
	var out []string
	for i, line := range strings.Split(text, "\n") {
		where := fmt.Sprintf("line %d %q", i+1, line)
		found := prefixesIn(line)
		switch {
		case len(found) == 0:
			out = append(out, where+": no package prefix")
		case len(found) > 1:
			out = append(out, fmt.Sprintf("%s: %d package prefixes %q, want 1", where, len(found), found))
		}
		if !startsWithPrefix(line) {
			out = append(out, where+": does not start with a package prefix")
		} else if from != "" && i == 0 && !strings.HasPrefix(line, from) {
			out = append(out, fmt.Sprintf("%s: starts with another package's prefix, want %q", where, from))
		}
		seen := map[string]bool{}
		for _, seg := range strings.Split(line, ": ") {
			if seen[seg] {
				out = append(out, fmt.Sprintf("%s: repeats the segment %q", where, seg))
			}
			seen[seg] = true
		}
	}
	return out
}

// prefixesIn returns the package prefixes that line carries: a package's name and ": " at
// the start of a segment (the start of the line, or after ": "), or right after punctuation
// ("err=fencing: ...", "(store: ...)"). After a letter, a digit or a space it is a word of a
// text ("not leader: ", leader.ErrNotLeader's text followed by its cause), not a prefix.
func prefixesIn(line string) []string {
	var found []string
	for _, p := range prefixes {
		for i := 0; ; {
			j := strings.Index(line[i:], p)
			if j < 0 {
				break
			}
			at := i + j
			if at == 0 || strings.HasSuffix(line[:at], ": ") || punctuation(line[at-1]) {
				found = append(found, p)
			}
			i = at + len(p)
		}
	}
	return found
}

func punctuation(b byte) bool {
	return !(b == ' ' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b >= 0x80)
}

func startsWithPrefix(line string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

// check fails t when err is nil, when its text breaks the rule (see violations) or when it
// does not match each of want.
func check(t *testing.T, err error, from string, want ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one matching %v", want)
	}
	text := err.Error()
	t.Logf("%q", text)
	for _, v := range violations(text, from) {
		t.Errorf("text %q: %s", text, v)
	}
	for _, w := range want {
		if !errors.Is(err, w) {
			t.Errorf("text %q: does not match %q (%T) with errors.Is", text, w, w)
		}
	}
}

// An errCase is one error provoked for real through one surface.
type errCase struct {
	// name is "<surface>/<sentinel>", and "/<how>" when the surface returns the sentinel
	// in several ways.
	name string
	// from is the prefix the text must start with: the package that made the error.
	from string
	// want are the sentinels the error must match.
	want []error
	// err provokes the error.
	err func(t *testing.T) error
}

// run runs each case as a parallel subtest named after it, under t.
func run(t *testing.T, cases []errCase) {
	t.Helper()
	names := map[string]bool{}
	for _, c := range cases {
		if names[c.name] {
			t.Fatalf("two cases named %q", c.name)
		}
		names[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			check(t, c.err(t), c.from, c.want...)
		})
	}
}

// TestChecker checks the checker: it passes the texts the rule allows and flags the others.
func TestChecker(t *testing.T) {
	t.Parallel()
	ok := []string{
		`fencing: release "orders/42": not held`,
		`fencing: acquire "a": not acquired: held by another owner after waiting 2s, first in the queue: context deadline exceeded`,
		"fencing: release \"a\": not held\nfencing: release \"b\": not held",
		`asynqfence: resource of task "invoice:send": bad payload`,
		`store: stale fencing token 5 for "order:7" (high-water mark 9)`,
		`leader: elector "n": not leader: campaigning: another process leads`,
		`fencingtest: the context holds no lock of Do, DoAll or Lead`,
	}
	for _, text := range ok {
		if v := violations(text, ""); len(v) > 0 {
			t.Errorf("violations(%q) = %q, want none", text, v)
		}
	}
	bad := []struct{ text, from string }{
		{"", ""},
		{`not held`, ""},
		{`release "a": fencing: not held`, ""},
		{`fencing: release "a": fencing: extend "a": not held`, ""},
		{`asynqfence: fencing: acquire "a": not acquired`, ""},
		{`fencing: acquire "a": not acquired: not acquired`, ""},
		{`store: check "t/r": store: record not found`, ""},
		{"fencing: release \"a\": not held\nrelease \"b\": not held", ""},
		{`fencing: acquire "a": not acquired`, "asynqfence: "},
		{`code=423, message=Locked, err=fencing: acquire "a": not acquired`, ""},
		{`fencemw: resource key (fencing: acquire "a": not acquired)`, ""},
	}
	for _, b := range bad {
		if v := violations(b.text, b.from); len(v) == 0 {
			t.Errorf("violations(%q, %q) found none, want some", b.text, b.from)
		}
	}
	// check's matching, on a text that passes.
	err := fmt.Errorf("fencing: wait: %w", context.Canceled)
	if !errors.Is(err, context.Canceled) || len(violations(err.Error(), "fencing: ")) > 0 {
		t.Errorf("check's matching: %v", err)
	}
}
