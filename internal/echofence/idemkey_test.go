package echofence

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/fencing"
)

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", MaxIdempotencyKeyLen)
	for _, tc := range []struct {
		values  []string
		key     string
		present bool
		ok      bool
	}{
		{nil, "", false, true},
		{[]string{"abc"}, "abc", true, true},
		{[]string{`"abc"`}, "abc", true, true},
		{[]string{`"a\"b\\c"`}, `a"b\c`, true, true},
		{[]string{`a"b`}, `a"b`, true, true}, // not a string: as it is
		{[]string{"a b{}%:\xff"}, "a b{}%:\xff", true, true},
		{[]string{long}, long, true, true},
		{[]string{`"` + long + `"`}, long, true, true},
		{[]string{long + "k"}, "", true, false},
		{[]string{""}, "", true, false},
		{[]string{`""`}, "", true, false},
		{[]string{`"`}, "", true, false},
		{[]string{`"abc`}, "", true, false},
		{[]string{`"a"b"`}, "", true, false},
		{[]string{`"a\b"`}, "", true, false},
		{[]string{`"a\"`}, "", true, false},
		{[]string{"\"\xff\""}, "", true, false},
		{[]string{"a\x00b"}, "", true, false},
		{[]string{"a\tb"}, "", true, false},
		{[]string{"a\x7fb"}, "", true, false},
		{[]string{"a", "b"}, "", true, false},
	} {
		h := http.Header{"Idempotency-Key": tc.values}
		key, present, err := idempotencyKey(h, "Idempotency-Key")
		if key != tc.key || present != tc.present || (err == nil) != tc.ok || (err != nil && !errors.Is(err, fencing.ErrInvalid)) {
			t.Errorf("idempotencyKey(%q) = %q, %v, %v; want %q, %v, ok %v", tc.values, key, present, err, tc.key, tc.present, tc.ok)
		}
	}
}

// TestIdempotencyName checks that distinct (scope, route, key) triples give distinct names,
// and that none is a name the Fence middleware locks.
func TestIdempotencyName(t *testing.T) {
	t.Parallel()
	if got, want := IdempotencyName("acme", "/payments/:id", "k 1"), ":idem acme /payments/:id k 1"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	triples := [][3]string{
		{"", "/a", "b c"}, {"", "/a b", "c"}, {"a", "/b", "c"}, {"a /b", "", "c"}, {"a", "", "/b c"},
		{"a%20b", "/c", "d"}, {"a b", "/c", "d"}, {"", "", ""}, {" ", "/", "x"}, {"", " /", "x"},
	}
	seen := map[string][3]string{}
	for _, tr := range triples {
		name := IdempotencyName(tr[0], tr[1], tr[2])
		if other, dup := seen[name]; dup {
			t.Errorf("%q and %q both give %q", other, tr, name)
		}
		seen[name] = tr
		if name[0] != ':' {
			t.Errorf("%q: want a name that starts with ':'", name)
		}
	}
	// No Fence name starts with ':': a default name starts with '/', and a Namespace name
	// with its namespace, never empty, whose ':' are encoded.
	for _, ns := range []string{":", "::a", "%3A", "a"} {
		if name := Qualify(ns, ":idem x"); name[0] == ':' {
			t.Errorf("Qualify(%q, ...) = %q starts with ':'", ns, name)
		}
	}
}
