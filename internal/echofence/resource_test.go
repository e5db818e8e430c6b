package echofence

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/fencing"
)

func TestQualify(t *testing.T) {
	t.Parallel()
	tests := []struct{ ns, key, want string }{
		{"order", "42", "order:42"},
		{"/orders/:id", "42", "%2Forders/%3Aid:42"},
		{"a/b", "c", "a/b:c"},
		{"a%3Ab", "c", "a%253Ab:c"},
		{"", "k", ":k"},
	}
	for _, tc := range tests {
		if got := Qualify(tc.ns, tc.key); got != tc.want {
			t.Errorf("Qualify(%q, %q) = %q, want %q", tc.ns, tc.key, got, tc.want)
		}
	}
	// Different pairs never collide, whatever the key holds.
	pairs := [][2]string{{"a", "b:c"}, {"a:b", "c"}, {"a%3Ab", "c"}, {"a", "%3Ab:c"}, {"a:", "b:c"}, {"a", ":b:c"},
		{"/a/", ":id 1"}, {"%2Fa/", ":id 1"}, {"/a", "b"}}
	seen := map[string][2]string{}
	for _, p := range pairs {
		name := Qualify(p[0], p[1])
		if q, dup := seen[name]; dup {
			t.Errorf("Qualify%q and Qualify%q both give %q", q, p, name)
		}
		if strings.HasPrefix(name, "/") {
			t.Errorf("Qualify%q = %q starts with '/', as default route names do", p, name)
		}
		seen[name] = p
	}
}

func TestRouteName(t *testing.T) {
	t.Parallel()
	tests := []struct{ route, key, want string }{
		{"/orders/:id", "42", "/orders/:id 42"},
		{"/orders/:id", "a b:c", "/orders/:id a b:c"},
		{"/a b/:id", "c", "/a%20b/:id c"},
		{"/100%/:id", "c", "/100%25/:id c"},
		{"", "k", "/ k"},
		{"x", "k", "/x k"},
	}
	for _, tc := range tests {
		if got := RouteName(tc.route, tc.key); got != tc.want {
			t.Errorf("RouteName(%q, %q) = %q, want %q", tc.route, tc.key, got, tc.want)
		}
	}
	// Different pairs never collide, whatever the key holds.
	pairs := [][2]string{{"/a", "b c"}, {"/a b", "c"}, {"/a%20b", "c"}, {"/a", "%20b c"}, {"/a ", "b c"}, {"/a", " b c"}}
	seen := map[string][2]string{}
	for _, p := range pairs {
		name := RouteName(p[0], p[1])
		if q, dup := seen[name]; dup {
			t.Errorf("RouteName%q and RouteName%q both give %q", q, p, name)
		}
		seen[name] = p
	}
}

func TestValidKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"42", true},
		{"a b:c/d{e}", true},
		{"ünï", true},
		{strings.Repeat("x", MaxKeyLen), true},
		{"", false},
		{strings.Repeat("x", MaxKeyLen+1), false},
		{"a\xffb", false},
		{"a\x00b", false},
		{"a\nb", false},
		{"a\x7fb", false},
	} {
		err := ValidKey(tc.key)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, fencing.ErrInvalid)) {
			t.Errorf("ValidKey(%.20q) = %v, want ok %v or an error matching ErrInvalid", tc.key, err, tc.ok)
		}
	}
}

func TestCheckLookup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lookup string
		ok     bool
	}{
		{"param:id", true},
		{"header:Authorization:Bearer ,query:id", true},
		{"form:f,cookie:c", true},
		{"path:id", false},
		{"param:", false},
		{"param", false},
		{"param:id,", false},
		{"header::x", false},
		{"", false},
	} {
		err := checkLookup(tc.lookup)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, fencing.ErrInvalid)) {
			t.Errorf("checkLookup(%q) = %v, want ok %v or an error matching ErrInvalid", tc.lookup, err, tc.ok)
		}
	}
}
