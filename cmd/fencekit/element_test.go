package main

import "testing"

// TestParseElement reads queue elements as fencing/lib.lua's parse does.
func TestParseElement(t *testing.T) {
	const id = "liveBBBBBBBBBBBBBBBBBB"
	tests := []struct {
		name, element string
		want          element
		ok            bool
	}{
		{"exclusive", id + ".1.3000", element{locker: id, leaseMs: 3000, mode: modeExclusive}, true},
		{"floor", id + ".2.3000f", element{locker: id, leaseMs: 3000, mode: modeExclusive, floor: true}, true},
		{"expiry", id + ".3.2000e3600000", element{locker: id, leaseMs: 2000, mode: modeExclusive, floor: true, expiryMs: 3_600_000}, true},
		{"shared", id + ".4.3000s", element{locker: id, leaseMs: 3000, mode: modeShared}, true},
		{"shared-floor", id + ".5.3000fs", element{locker: id, leaseMs: 3000, mode: modeShared, floor: true}, true},
		{"shared-expiry", id + ".6.3000e60000s", element{locker: id, leaseMs: 3000, mode: modeShared, floor: true, expiryMs: 60_000}, true},
		{"limit", id + ".7.1500l4", element{locker: id, leaseMs: 1500, mode: modeLimit, limit: 4}, true},
		{"limit-expiry", id + ".8.3000e5000l12", element{locker: id, leaseMs: 3000, mode: modeLimit, limit: 12, floor: true, expiryMs: 5000}, true},
		{"no-lease", id + ".1", element{}, false},
		{"old-id-only", id, element{}, false},
		{"no-counter", id + "..3000", element{}, false},
		{"letters", id + ".x.3000", element{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseElement(tt.element)
			if got != tt.want || ok != tt.ok {
				t.Errorf("parseElement(%q) = %+v, %v; want %+v, %v", tt.element, got, ok, tt.want, tt.ok)
			}
		})
	}
}
