package main

import (
	"testing"
	"time"
)

func TestFormat(t *testing.T) {
	t.Parallel()
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
