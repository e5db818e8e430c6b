package main

import (
	"testing"

	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/fencekit/fencekit/internal/wire"
)

// TestKindOf classifies the keys that package wire names for awkward resource names (braces,
// colons, ":lock" and "b64" inside), and keys of no resource.
func TestKindOf(t *testing.T) {
	t.Parallel()
	cl := newClassifier("p:")
	names := []string{"order-42", "{", "}", "{}", "x}:lock", "a:b:c", "with space", "ünïcode", "line\nbreak", "\xff\x00", ":lock", "w:x", "b64", "x:b64:lock"}
	for _, name := range names {
		k := wire.For("p:", name)
		for key, want := range map[string]int{
			k.Lock:                       kindLock,
			k.Fence:                      kindFence,
			k.Queue:                      kindQueue,
			k.Waiter("abc"):              kindWaiter,
			k.Record(wire.Value("o", 3)): kindRecord,
			k.Memo(echofence.RecordName): kindIdem,
			k.Memo("other"):              kindOther,
			k.Waiter(""):                 kindOther,
		} {
			if got := cl.kindOf(key); got != want {
				t.Errorf("kindOf(%q) = %s, want %s", key, keyKinds[got].id, keyKinds[want].id)
			}
		}
	}
	for _, key := range []string{"p:other", "p:{}:lock", "p:{x}", "p:{x}lock", "q:{x}:lock", "p:{e30}:b64:", "p:{b3JkZXI}:b64:lock", "p:{!!}:b64:lock", "p:{x}:b64:fence"} {
		if got := cl.kindOf(key); got != kindOther {
			t.Errorf("kindOf(%q) = %s, want other", key, keyKinds[got].id)
		}
	}
}
