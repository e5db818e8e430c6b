package wire

import (
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fencekit/fencekit/internal/topology"
)

func TestKeySlotVector(t *testing.T) {
	// The cluster specification's test vector: CRC16("123456789") = 0x31C3.
	if got := topology.Slot("123456789"); got != 0x31C3%16384 {
		t.Fatalf("got %d, want %d", got, 0x31C3%16384)
	}
}

func TestFor(t *testing.T) {
	cases := []struct{ name, lock, fence string }{
		{"order-42", "fencing:{order-42}:lock", "fencing:{order-42}:fence"},
		{"a b:c", "fencing:{a b:c}:lock", "fencing:{a b:c}:fence"},
		{"{", "fencing:{ew}:b64:lock", "fencing:{ew}:b64:fence"},
		{"}", "fencing:{fQ}:b64:lock", "fencing:{fQ}:b64:fence"},
		{"a{b}c", "fencing:{YXtifWM}:b64:lock", "fencing:{YXtifWM}:b64:fence"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := For("fencing:", tc.name)
			if k.Lock != tc.lock || k.Fence != tc.fence {
				t.Fatalf("got %q %q, want %q %q", k.Lock, k.Fence, tc.lock, tc.fence)
			}
			if got, ok := ResourceOf("fencing:", k.Lock); !ok || got != tc.name {
				t.Fatalf("ResourceOf(%q): got %q %v, want %q", k.Lock, got, ok, tc.name)
			}
		})
	}
}

func checkKeys(t *testing.T, prefix, name string) Keys {
	k := For(prefix, name)
	for _, key := range []string{k.Lock, k.Fence, k.Queue, k.Channel} {
		if !strings.HasPrefix(key, prefix) {
			t.Fatalf("%q: key %q lacks the prefix", name, key)
		}
	}
	if s := topology.Slot(k.Lock); topology.Slot(k.Fence) != s || topology.Slot(k.Queue) != s || topology.Slot(k.Channel) != s || topology.Slot(k.Waiter("x")) != s || topology.Slot(k.Memo("idem")) != s {
		t.Fatalf("%q: keys in slots %d, %d, %d, %d: a script would fail with CROSSSLOT", name, s, topology.Slot(k.Fence), topology.Slot(k.Queue), topology.Slot(k.Channel))
	}
	if !strings.ContainsAny(name, "{}") && k.Lock != prefix+"{"+name+"}:lock" {
		t.Fatalf("%q: plain name not used as it is: %q", name, k.Lock)
	}
	if got, ok := ResourceOf(prefix, k.Lock); !ok || got != name {
		t.Fatalf("ResourceOf(%q): got %q %v, want %q", k.Lock, got, ok, name)
	}
	if g, ok := GrantsOf(k.Grants("id"), "id"); !ok || g != k {
		t.Fatalf("GrantsOf(%q): got %+v %v, want %+v", k.Grants("id"), g, ok, k)
	}
	return k
}

// FuzzFor checks the key layout for any pair of names: every key carries the prefix, a name's
// keys share one cluster slot, distinct names never share a key, and a lock key names its
// resource back.
func FuzzFor(f *testing.F) {
	for _, s := range []string{"order-42", "{", "}", "{}", "a}b", "{x}", "a{b}c", "x:fence", "\n", "\xff\x00", "ew", "ew}:b64", "fQ"} {
		f.Add(s, "other")
		f.Add(s, "{"+s+"}")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if a == "" || b == "" {
			return
		}
		ka, kb := checkKeys(t, "fencing:", a), checkKeys(t, "fencing:", b)
		if a == b {
			return
		}
		for _, x := range []string{ka.Lock, ka.Fence, ka.Queue, ka.Channel} {
			for _, y := range []string{kb.Lock, kb.Fence, kb.Queue, kb.Channel} {
				if x == y {
					t.Fatalf("names %q and %q share the key %q", a, b, x)
				}
			}
		}
	})
}

// FuzzResourceOf checks that a key ResourceOf accepts is the lock key of the name it returns.
func FuzzResourceOf(f *testing.F) {
	for _, s := range []string{"fencing:{a}:lock", "fencing:{ew}:b64:lock", "fencing:{}:lock", "fencing:{a}:fence", "fencing:{YQ}:b64:lock", "fencing:{a}b}:lock"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if name, ok := ResourceOf("fencing:", key); ok && For("fencing:", name).Lock != key {
			t.Fatalf("ResourceOf(%q) = %q, whose lock key is %q", key, name, For("fencing:", name).Lock)
		}
	})
}

func TestValidMemo(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"idem", true}, {"done-1_A", true}, {strings.Repeat("a", 64), true},
		{"", false}, {strings.Repeat("a", 65), false}, {"lock", false}, {"fence", false},
		{"queue", false}, {"grant", false}, {"b64", false}, {"w:x", false}, {"a b", false}, {"r:1", false},
	} {
		if got := ValidMemo(tc.name); got != tc.want {
			t.Errorf("ValidMemo(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestHashHolders(t *testing.T) {
	kind, hs, old := HashHolders(map[string]string{"k": "l3", "q": "0", "e": "5", "x": "9", "t": "20", "own1": "9:4", "own2": "5:3"})
	if old || kind != (Kind{Limit: 3}) || len(hs) != 2 {
		t.Fatalf("layout 2: got %v %v %v", kind, hs, old)
	}
	kind, hs, old = HashHolders(map[string]string{"limit": "shared", "until": "20", "q": "1", "own:7": "9"})
	if !old || !kind.Shared || len(hs) != 1 || hs[0].Owner != "own" || hs[0].Token != 7 || hs[0].End.UnixMilli() != 9 {
		t.Fatalf("earlier layout: got %v %v %v", kind, hs, old)
	}
}

// FuzzElement writes an element from the fuzzer's fields and reads it back, and reads the
// fuzzer's string as an element, an owner, a lock value, a kind and a waiter value: every
// reader takes any input without a panic, and what a writer wrote reads back as it was.
func FuzzElement(f *testing.F) {
	f.Add("AbC-_9", uint64(7), int64(30000), false, int64(0), "x", "", "AbC-_9.7.30000e600000s~MFRGG")
	f.Add("id", uint64(0), int64(1), true, int64(0), "l4", "job 42: 100%", "id.0.1fl4")
	f.Add("id", uint64(1<<63), int64(86400000), false, int64(5000), "s", "a.b~c:d%e", "owner~a%2Eb:12+")
	f.Add("q", uint64(3), int64(10), false, int64(0), "l0", "é☃", "1700000000000")
	f.Fuzz(func(t *testing.T, locker string, seq uint64, leaseMS int64, floor bool, expiryMS int64, kind, label, raw string) {
		// Any input: no reader panics, and a kind read writes back as it was.
		ParseElement(raw)
		LabelOf(raw)
		SplitValue(raw)
		ParseWaiterValue(raw)
		if k, ok := ParseKind(raw); ok && k.Arg() != raw {
			t.Fatalf("ParseKind(%q) = %+v, which writes %q", raw, k, k.Arg())
		}

		// An element as a Locker writes one: its id is base64url, its lease and expiry
		// positive milliseconds, its label valid (fencing.WithLabel).
		k, ok := ParseKind(kind)
		if !ok || locker == "" || strings.ContainsFunc(locker, notIDRune) || leaseMS <= 0 || expiryMS < 0 || !validLabel(label) {
			return
		}
		e := Element{Locker: locker, Seq: seq, Lease: time.Duration(leaseMS%(1<<40)+1) * time.Millisecond,
			Floor: floor || expiryMS > 0, Expiry: time.Duration(expiryMS%(1<<40)) * time.Millisecond, Kind: k, Label: label}
		s := e.String()
		got, ok := ParseElement(s)
		if !ok || got != e {
			t.Fatalf("ParseElement(%q) = %+v, %v; want %+v", s, got, ok, e)
		}
		if l := LabelOf(s); l != label {
			t.Fatalf("LabelOf(element %q) = %q, want %q", s, l, label)
		}

		// An owner with the label, in a lock value with and without the waiters' mark.
		owner := Labeled(locker, label)
		if l := LabelOf(owner); l != label {
			t.Fatalf("LabelOf(owner %q) = %q, want %q", owner, l, label)
		}
		token := int64(seq>>1) + 1
		for _, v := range []string{Value(owner, token), Value(owner, token) + "+"} {
			o, tok, ok := SplitValue(v)
			if !ok || o != owner || tok != token {
				t.Fatalf("SplitValue(%q) = %q, %d, %v; want %q, %d", v, o, tok, ok, owner, token)
			}
		}
	})
}

// notIDRune reports whether r is outside a Locker id's alphabet (base64url).
func notIDRune(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
}

// validLabel is fencing's rule for a label.
func validLabel(s string) bool {
	return len(s) <= 64 && utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}
