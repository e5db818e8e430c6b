package fencing

import (
	"github.com/fencekit/fencekit/internal/topology"

	"strings"
	"testing"
)

func TestKeySlotVector(t *testing.T) {
	// The cluster specification's test vector: CRC16("123456789") = 0x31C3.
	if got := topology.Slot("123456789"); got != 0x31C3%16384 {
		t.Fatalf("got %d, want %d", got, 0x31C3%16384)
	}
}

func TestResourceKeys(t *testing.T) {
	cases := []struct{ name, lock, fence string }{
		{"order-42", "fencing:{order-42}:lock", "fencing:{order-42}:fence"},
		{"a b:c", "fencing:{a b:c}:lock", "fencing:{a b:c}:fence"},
		{"{", "fencing:{ew}:b64:lock", "fencing:{ew}:b64:fence"},
		{"}", "fencing:{fQ}:b64:lock", "fencing:{fQ}:b64:fence"},
		{"a{b}c", "fencing:{YXtifWM}:b64:lock", "fencing:{YXtifWM}:b64:fence"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := resourceKeys(DefaultPrefix, tc.name)
			if k.lock != tc.lock || k.fence != tc.fence {
				t.Fatalf("got %q %q, want %q %q", k.lock, k.fence, tc.lock, tc.fence)
			}
		})
	}
}

func checkKeys(t *testing.T, prefix, name string) keys {
	k := resourceKeys(prefix, name)
	for _, key := range []string{k.lock, k.fence, k.queue, k.channel} {
		if !strings.HasPrefix(key, prefix) {
			t.Fatalf("%q: key %q lacks the prefix", name, key)
		}
	}
	if s := topology.Slot(k.lock); topology.Slot(k.fence) != s || topology.Slot(k.queue) != s || topology.Slot(k.channel) != s || topology.Slot(k.queue+":w:x") != s {
		t.Fatalf("%q: keys in slots %d, %d, %d, %d: a script would fail with CROSSSLOT", name, s, topology.Slot(k.fence), topology.Slot(k.queue), topology.Slot(k.channel))
	}
	if !strings.ContainsAny(name, "{}") && k.lock != prefix+"{"+name+"}:lock" {
		t.Fatalf("%q: plain name not used as it is: %q", name, k.lock)
	}
	return k
}

// FuzzResourceKeys checks the key layout for any pair of names: every key carries the
// prefix, a name's keys share one cluster slot, and distinct names never share a key.
func FuzzResourceKeys(f *testing.F) {
	for _, s := range []string{"order-42", "", "{", "}", "{}", "a}b", "{x}", "a{b}c", "x:fence", "\n", "\xff\x00", "ew", "ew}:b64", "fQ"} {
		f.Add(s, "other")
		f.Add(s, "{"+s+"}")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if validResource(a) != nil || validResource(b) != nil {
			return
		}
		ka, kb := checkKeys(t, DefaultPrefix, a), checkKeys(t, DefaultPrefix, b)
		if a == b {
			return
		}
		for _, x := range []string{ka.lock, ka.fence, ka.queue, ka.channel} {
			for _, y := range []string{kb.lock, kb.fence, kb.queue, kb.channel} {
				if x == y {
					t.Fatalf("names %q and %q share the key %q", a, b, x)
				}
			}
		}
	})
}

// FuzzParseAcquire feeds arbitrary replies to the reply parser: it must never panic, and
// it accepts only positive tokens.
func FuzzParseAcquire(f *testing.F) {
	f.Add(int64(1), "42", int64(30000))
	f.Add(int64(0), "", int64(5))
	f.Add(int64(1), "-3", int64(0))
	f.Add(int64(1), "9223372036854775808", int64(0))
	f.Fuzz(func(t *testing.T, flag int64, token string, pttl int64) {
		a, err := parseAcquire([]any{flag, token, pttl})
		if err == nil && a.flag == flagAcquired && a.token <= 0 {
			t.Fatalf("accepted token %d from %q", a.token, token)
		}
		_, _ = parseAcquire([]any{flag})
		_, _ = parseAcquire(token)
	})
}
