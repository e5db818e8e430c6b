package asynqfence_test

import (
	"strings"
	"testing"
)

// packagePrefixes are the prefixes of fencekit's packages' errors.
var packagePrefixes = []string{"asynqfence: ", "fencing: ", "store: ", "fencemw: ", "cronfence: ", "leader: ", "servercheck: "}

// checkText checks an error's text against the rule of docs/asynq.md: one line that starts
// with want, the prefix of the package that made the error ("asynqfence: " for the adapter's
// own, "fencing: " for the Locker's, returned as they are), carries no other package's prefix
// and no segment twice.
func checkText(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("got no error, want one starting %q", want)
		return
	}
	msg := err.Error()
	n := 0
	for _, p := range packagePrefixes {
		n += strings.Count(msg, p)
	}
	seen := map[string]bool{}
	repeated := ""
	for _, seg := range strings.Split(msg, ": ") {
		if seen[seg] && repeated == "" {
			repeated = seg
		}
		seen[seg] = true
	}
	switch {
	case !strings.HasPrefix(msg, want) || n != 1:
		t.Errorf("got text %q, want it to start with %q, the one package prefix it carries", msg, want)
	case strings.Contains(msg, "\n"):
		t.Errorf("got text %q, want one line", msg)
	case repeated != "":
		t.Errorf("got text %q, which repeats %q", msg, repeated)
	}
}
