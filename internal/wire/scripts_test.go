package wire

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/redistest"
)

// TestScriptsAssembled checks that every script starts with the constants of this package,
// spelled from their Go definitions, and that the scripts with slow paths took grants.lua's
// functions in place of their one include line, after their fast paths.
func TestScriptsAssembled(t *testing.T) {
	for name, s := range map[string]struct {
		body    string
		script  *Script
		include bool
	}{
		"acquire.lua": {acquireSrc, Acquire, true}, "acquireall.lua": {acquireAllSrc, AcquireAll, true},
		"release.lua": {releaseSrc, Release, true}, "poll.lua": {pollSrc, Poll, true},
		"extend.lua": {extendSrc, Extend, false}, "ttl.lua": {ttlSrc, TTL, false}, "inspect.lua": {inspectSrc, Inspect, false},
	} {
		if h := header(strings.Replace(s.body, include, grantsSrc, 1)); !strings.HasPrefix(s.script.Source(), h) || (name != "inspect.lua" && !strings.HasPrefix(h, "local ")) {
			t.Errorf("%s does not start with the constants it names", name)
		}
		n := strings.Count(s.body, include)
		switch {
		case s.include && n != 1:
			t.Errorf("%s has %d include lines, want 1", name, n)
		case !s.include && n != 0:
			t.Errorf("%s includes grants.lua, which it does not need", name)
		case s.include && !strings.Contains(s.script.Source(), "local function fill("):
			t.Errorf("%s: grants.lua was not included", name)
		}
	}
	if h := header("ENTRY_TTL RECORD_TTL NOT_HELD"); h != "local NOT_HELD, ENTRY_TTL, RECORD_TTL = 5, '3000', '10000'\n" {
		t.Errorf("the constants do not spell NotHeld, EntryTTL and RecordTTL: %q", h)
	}
}

// TestAcquireIdempotentForOwner replays the acquire script with the same owner value, as
// go-redis does when a connection drops after the script ran: the replay must return the same
// token, not strand the lock or issue a second token, and must reset the lease, so that a WAIT
// after it (WithReplicas) has a write to wait for. Each kind.
func TestAcquireIdempotentForOwner(t *testing.T) {
	r := redistest.New(t)
	ctx := t.Context()
	for _, kind := range []string{"x", "s", "l3"} {
		t.Run(kind, func(t *testing.T) {
			k := For(r.Prefix, "res-"+kind)
			run := func(owner string) AcquireReply {
				t.Helper()
				res, err := Acquire.RunOn(ctx, r.Client, k, "", owner, 30000, kind).Result()
				if err != nil {
					t.Fatal(err)
				}
				a, err := ParseAcquire(res)
				if err != nil {
					t.Fatal(err)
				}
				return a
			}
			a1 := run("owner-a")
			if kind == "x" {
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

// TestElementParsedAlike checks that the scripts read a queue element as ParseElement does:
// the Locker, the lease, the kind, the floor and the counter's expiry, for what String writes
// and for what it does not.
func TestElementParsedAlike(t *testing.T) {
	r := redistest.New(t)
	parse := strings.SplitN(grantsSrc, "local function parse(element)", 2)[1]
	parse = "local function parse(element)" + parse[:strings.Index(parse, "\nend\n")+5]
	src := parse + `local id, lease, kind, floor, expiry = parse(ARGV[1])
if not id then return false end
return {id, lease, kind, floor, expiry}`
	elems := []string{"", "a", "a.1", "a.1.3000", "a.1.3000s", "a.1.3000l4", "a.1.3000f", "a.1.3000e5000l2", "a.x.3000", "a.1.x"}
	for _, e := range []Element{
		{Locker: "id", Seq: 7, Lease: 3 * time.Second, Kind: Kind{Limit: 1}},
		{Locker: "id", Seq: 8, Lease: time.Second, Kind: Kind{Shared: true}, Floor: true},
		{Locker: "id", Seq: 9, Lease: 1500 * time.Millisecond, Kind: Kind{Limit: 5}, Floor: true, Expiry: time.Minute},
	} {
		elems = append(elems, e.String())
		if got, ok := ParseElement(e.String()); !ok || got != e {
			t.Errorf("ParseElement(%q) = %+v, %v; want %+v", e.String(), got, ok, e)
		}
	}
	for _, s := range elems {
		res, err := r.Client.Eval(context.Background(), src, nil, s).Result()
		e, ok := ParseElement(s)
		if err != nil && !strings.Contains(err.Error(), "nil") {
			t.Fatalf("%q: %v", s, err)
		}
		arr, _ := res.([]any)
		if (len(arr) == 5) != ok {
			t.Errorf("%q: the script reads it: %v; ParseElement: %v", s, len(arr) == 5, ok)
			continue
		}
		if !ok {
			continue
		}
		floor := "0"
		if e.Floor {
			floor = "1"
		}
		want := []any{e.Locker, itoa(e.Lease.Milliseconds()), e.Kind.Arg(), floor, itoa(e.Expiry.Milliseconds())}
		for i := range want {
			if arr[i] != want[i] {
				t.Errorf("%q: the script reads %v, ParseElement %v", s, arr, want)
				break
			}
		}
	}
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
