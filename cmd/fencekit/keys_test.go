package main

import (
	"testing"
	"time"
)

// TestKeys checks the key layout against the examples of package fencing and that
// parseKey inverts keysFor, also for names with braces, colons and ":lock" inside.
func TestKeys(t *testing.T) {
	if got := keysFor("fencing:", "order-42").lock; got != "fencing:{order-42}:lock" {
		t.Errorf("plain: got %q", got)
	}
	if got := keysFor("fencing:", "{braced}").fence; got != "fencing:{e2JyYWNlZH0}:b64:fence" {
		t.Errorf("braced: got %q", got)
	}
	names := []string{"order-42", "{", "}", "{}", "x}:lock", "a:b:c", "with space", "ünïcode", "line\nbreak", "\xff\x00", ":lock", "w:x"}
	for _, name := range names {
		k := keysFor("p:", name)
		for key, suffix := range map[string]string{k.lock: "lock", k.fence: "fence", k.queue: "queue", k.waiter("abc"): "w:abc"} {
			gotName, gotSuffix, ok := parseKey("p:", key)
			if !ok || gotName != name || gotSuffix != suffix {
				t.Errorf("parseKey(%q) = %q, %q, %v; want %q, %q", key, gotName, gotSuffix, ok, name, suffix)
			}
		}
	}
	for _, key := range []string{"p:other", "p:{}:lock", "p:{x}", "p:{x}lock", "q:{x}:lock", "p:{e30}:b64:", "p:{b3JkZXI}:b64:lock", "p:{!!}:b64:lock"} {
		if name, suffix, ok := parseKey("p:", key); ok {
			t.Errorf("parseKey(%q) = %q, %q: want no match", key, name, suffix)
		}
	}
}

func TestGlob(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"*", "", true},
		{"*", "a/b", true},
		{"order-*", "order-42", true},
		{"order-*", "orders", false},
		{"*42", "order-42", true},
		{"o?der*", "order-1", true},
		{"*[{}]*", "{braced}", true},
		{"*[{}]*", "plain", false},
		{"[^a]*", "abc", false},
		{"[!a]*", "bcd", true},
		{"[a-c]x", "bx", true},
		{`\*`, "*", true},
		{`\*`, "a", false},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYbZ", false},
	}
	for _, tt := range tests {
		if got := globMatch(tt.pattern, tt.name); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
	if got := escapeGlob(`a*b?[c]\`); got != `a\*b\?\[c\]\\` {
		t.Errorf("escapeGlob: got %q", got)
	}
}

func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		450 * time.Millisecond:          "450ms",
		29849 * time.Millisecond:        "29.8s",
		10 * time.Minute:                "10m",
		12*time.Minute + 34*time.Second: "12m34s",
		90 * time.Minute:                "1h30m",
		2 * time.Hour:                   "2h",
		2*time.Hour + 5*time.Second:     "2h0m5s",
		-time.Second:                    "0s",
	} {
		if got := duration(d); got != want {
			t.Errorf("duration(%v) = %q, want %q", d, got, want)
		}
	}
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 5 << 20: "5.0 MiB"} {
		if got := byteSize(n); got != want {
			t.Errorf("byteSize(%d) = %q, want %q", n, got, want)
		}
	}
	for name, want := range map[string]string{"order-42": "order-42", "with space": "with space", "ключ": "ключ", " x": `" x"`, "a\nb": `"a\nb"`, "\xff": `"\xff"`} {
		if got := displayName(name); got != want {
			t.Errorf("displayName(%q) = %q, want %q", name, got, want)
		}
	}
}
