package wire

import (
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

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
