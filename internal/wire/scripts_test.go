package wire

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// TestScriptsAssembled checks that every script starts with the constants it names, spelled
// from their Go definitions, that every include was expanded, and that the exclusive acquire
// and release scripts, with their hand-off, stay short enough to read on their own.
func TestScriptsAssembled(t *testing.T) {
	for name, s := range Scripts {
		src, _ := sources.ReadFile(name)
		if h := header(expand(name)); !strings.HasPrefix(s.Source(), h) || (name != "inspect.lua" && !strings.HasPrefix(h, "local ")) {
			t.Errorf("%s does not start with the constants it names", name)
		}
		if strings.Contains(s.Source(), "-- #include") {
			t.Errorf("%s: an include was not expanded", name)
		}
		if n := strings.Count(string(src), "\n"); (name == "acquire.lua" || name == "release.lua") && n > 40 {
			t.Errorf("%s has %d lines, want at most 40", name, n)
		}
	}
	if h := header("ENTRY_TTL RECORD_TTL NOT_HELD"); h != "local NOT_HELD, ENTRY_TTL, RECORD_TTL = 5, '3000', '10000'\n" {
		t.Errorf("the constants do not spell NotHeld, EntryTTL and RecordTTL: %q", h)
	}
	// One place for each block: the hand-off, the token, the queue join, a holder's write, the
	// record of a release, the memo, the element's grammar.
	for _, block := range []string{"local function grant(", "redis.call('INCR'", "redis.call('APPEND'", "'HSET', lock, unpack(w)",
		"redis.call('RENAME'", "base .. ARGV[m]", "local function state(", "string.match(element, '^([^.]*)"} {
		n := 0
		files, _ := sources.ReadDir(".")
		for _, f := range files {
			src, _ := sources.ReadFile(f.Name())
			n += strings.Count(string(src), block)
		}
		if n != 1 {
			t.Errorf("%q stands %d times in the scripts' sources, want once", block, n)
		}
	}
}

// TestAcquireIdempotentForOwner replays the acquire script with the same owner value, as
// go-redis does when a connection drops after the script ran: the replay must return the same
// token, not strand the lock or issue a second token, and must reset the lease, so that a WAIT
// after it (WithReplicas) has a write to wait for. Each kind.
func TestAcquireIdempotentForOwner(t *testing.T) {
	r := redistest.New(t)
	ctx := t.Context()
	for _, kind := range []Kind{{Limit: 1}, {Shared: true}, {Limit: 3}} {
		t.Run(kind.Arg(), func(t *testing.T) {
			k := For(r.Prefix, "res-"+kind.Arg())
			run := func(owner string) AcquireReply {
				t.Helper()
				a, err := (&Acquire{Keys: k, Owner: owner, Lease: 30000, Kind: kind, Publish: "P"}).Run(ctx, r.Client)
				if err != nil {
					t.Fatal(err)
				}
				return a
			}
			a1 := run("owner-a")
			if kind.Exclusive() {
				r.Client.PExpire(ctx, k.Lock, time.Second)
			}
			a2 := run("owner-a") // the retry
			if a1.Code != Taken || a2.Code != Taken || a1.Token != a2.Token {
				t.Fatalf("got %+v then %+v, want the same token twice", a1, a2)
			}
			if ttl := r.Client.PTTL(ctx, k.Lock).Val(); ttl <= time.Second {
				t.Fatalf("after the retry the lock's TTL is %v, want the lease reset to 30s (a write for WAIT to cover)", ttl)
			}
			if v := r.Client.Get(ctx, k.Fence).Val(); v != "1" {
				t.Fatalf("fence: got %s, want 1 (one token issued)", v)
			}
		})
	}
}

// TestGrammarAlike is the property test of the values' grammar, which Go (encoding.go) and the
// scripts (grant.lua's parse, and what the scripts write) each define once: Go encodes an
// element, the script's parse reads it as ParseElement does; the script grants it and writes
// the lock value and the hash holder of its grant, which Go reads back (SplitValue,
// HashHolders, LabelOf). Strings that are not elements are refused alike.
func TestGrammarAlike(t *testing.T) {
	r := redistest.New(t)
	ctx := context.Background()
	src := "local element, id, lease, kind, rules = ARGV[1]\n" + expand("element.lua") + `if not id then return false end
return {id, lease, kind, rules}`
	scriptParse := func(s string) ([]any, bool) {
		res, err := r.Client.Eval(ctx, src, nil, s).Result()
		if err != nil && !strings.Contains(err.Error(), "nil") {
			t.Fatalf("%q: %v", s, err)
		}
		arr, _ := res.([]any)
		return arr, len(arr) == 4
	}
	label := rapid.Custom(func(t *rapid.T) string {
		return rapid.OneOf(rapid.Just(""), rapid.StringN(1, 64, 64)).Draw(t, "label")
	})
	rapid.Check(t, func(rt *rapid.T) {
		e := Element{
			Locker: rapid.StringMatching(`[A-Za-z0-9_-]{1,22}`).Draw(rt, "locker"),
			Seq:    rapid.Uint64().Draw(rt, "seq"),
			Lease:  time.Duration(rapid.Int64Range(1, 1<<40).Draw(rt, "lease")) * time.Millisecond,
			Label:  label.Draw(rt, "label"),
		}
		switch rapid.IntRange(0, 2).Draw(rt, "kind") {
		case 0:
			e.Kind = Kind{Limit: 1}
		case 1:
			e.Kind = Kind{Shared: true}
		default:
			e.Kind = Kind{Limit: rapid.IntRange(2, 1024).Draw(rt, "limit")}
		}
		if rapid.Bool().Draw(rt, "expiry") {
			e.Floor, e.Expiry = true, time.Duration(rapid.Int64Range(1000, 1<<40).Draw(rt, "expiry_ms"))*time.Millisecond
		} else {
			e.Floor = rapid.Bool().Draw(rt, "floor")
		}
		// Go encodes; Go and the script read it alike.
		s := e.String()
		if got, ok := ParseElement(s); !ok || got != e {
			rt.Fatalf("ParseElement(%q) = %+v, %v; want %+v", s, got, ok, e)
		}
		arr, ok := scriptParse(s)
		rules := Rules(e.Floor, e.Expiry)
		switch {
		case e.Kind.Shared:
			rules += "s"
		case e.Kind.Limit > 1:
			rules += "l" + strconv.Itoa(e.Kind.Limit)
		}
		want := []any{e.Locker, strconv.FormatInt(e.Lease.Milliseconds(), 10), e.Kind.Arg(), rules}
		if !ok || !equal(arr, want) {
			rt.Fatalf("%q: the script reads %v, want %v", s, arr, want)
		}
		// The script writes what Go reads back: an element's grant, exclusive or a hash
		// holder, and an owner's lock value.
		token := rapid.Int64Range(1, 1<<62).Draw(rt, "token")
		if owner, got, ok := SplitValue(Value(s, token) + "+"); !ok || owner != s || got != token || LabelOf(owner) != e.Label {
			rt.Fatalf("SplitValue(Value(%q, %d)+'+') = %q, %d, %v", s, token, owner, got, ok)
		}
		_, holders, _ := HashHolders(map[string]string{"k": e.Kind.Arg(), s: "123:" + strconv.FormatInt(token, 10)})
		if len(holders) != 1 || holders[0].Owner != s || holders[0].Token != token || LabelOf(holders[0].Owner) != e.Label {
			rt.Fatalf("HashHolders of %q: %+v", s, holders)
		}
	})
	for _, s := range []string{"", "a", "a.1", "a.1.x", "a.x.3000", ".1", "a.1.3000~", "a.1.3000s~MFRGG", "a.1.3000l2~not base32"} {
		_, goOK := ParseElement(s)
		_, luaOK := scriptParse(s)
		if goOK != luaOK {
			t.Errorf("%q: the script reads it: %v; ParseElement: %v", s, luaOK, goOK)
		}
	}
}

func equal(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestGrantWritesTheGrammar runs a real hand-off: a release grants the lock to a queued
// element that Go encoded, and Go reads the lock value the script wrote and the announcement
// it published.
func TestGrantWritesTheGrammar(t *testing.T) {
	r := redistest.New(t)
	ctx := t.Context()
	k := For(r.Prefix, "res")
	held, err := (&Acquire{Keys: k, Owner: "holder", Lease: 60000, Kind: Kind{Limit: 1}, Publish: "P"}).Run(ctx, r.Client)
	if err != nil || held.Code != Taken {
		t.Fatalf("acquire: %+v %v", held, err)
	}
	e := Element{Locker: "room", Seq: 3, Lease: 3 * time.Second, Kind: Kind{Limit: 1}, Label: "task 42: a.b~c"}
	q, err := (&Acquire{Keys: k, Owner: "waiter", Lease: 60000, Kind: Kind{Limit: 1}, Element: e.String(), Entry: WaiterValue(time.Now()), Publish: "P"}).Run(ctx, r.Client)
	if err != nil || q.Code != Queued {
		t.Fatalf("queue: %+v %v", q, err)
	}
	rel, err := (&Release{Keys: []Keys{k}, Values: []string{Value("holder", held.Token)}, Kind: Kind{Limit: 1}, Publish: "P", Self: "room"}).Run(ctx, r.Client)
	if err != nil || rel.Code != Granted || len(rel.Grants) != 1 || rel.Grants[0].Element != e.String() || rel.Grants[0].Token != held.Token+1 {
		t.Fatalf("release: %+v %v; want the grant to %q with token %d", rel, err, e.String(), held.Token+1)
	}
	owner, token, ok := SplitValue(r.Client.Get(ctx, k.Lock).Val())
	if got, _ := ParseElement(owner); !ok || token != held.Token+1 || got != e {
		t.Fatalf("the granted lock reads %q %d (%+v), want the element %+v", owner, token, got, e)
	}
}
