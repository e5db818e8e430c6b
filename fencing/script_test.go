package fencing

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/redistest"
)

// TestAcquireScriptIdempotentForOwner replays the acquire script with the same owner value,
// as go-redis does when a connection drops after the script ran: the replay must return the
// same token, not strand the lock or issue a second token, and must reset the lease, so that
// a WAIT after it (WithReplicas) has a write to wait for.
func TestAcquireScriptIdempotentForOwner(t *testing.T) {
	r := redistest.New(t)
	k := resourceKeys(r.Prefix, "res")
	run := func(owner string) (bool, int64) {
		t.Helper()
		res, err := acquireScript.run(t.Context(), r.Client, k.triple(), owner, 30000).Result()
		if err != nil {
			t.Fatal(err)
		}
		a, err := parseAcquire(res)
		if err != nil {
			t.Fatal(err)
		}
		return a.flag == flagAcquired, a.token
	}
	ok1, t1 := run("owner-a")
	r.Client.PExpire(t.Context(), k.lock, time.Second)
	ok2, t2 := run("owner-a") // the retry
	if !ok1 || !ok2 || t1 != t2 {
		t.Fatalf("got (%v, %d) then (%v, %d), want the same token twice", ok1, t1, ok2, t2)
	}
	if ttl := r.Client.PTTL(t.Context(), k.lock).Val(); ttl <= time.Second {
		t.Fatalf("after the retry the lock's TTL is %v, want the lease reset to 30s (a write for WAIT to cover)", ttl)
	}
	if ok, _ := run("owner-b"); ok {
		t.Fatal("another owner got the lock")
	}
	if v := r.Client.Get(t.Context(), k.fence).Val(); v != "1" {
		t.Fatalf("fence: got %s, want 1 (one token issued)", v)
	}
}

// TestScriptsAssembled checks that every script starts with the constants Go and Lua share,
// spelled from their Go definitions, and took lib.lua's functions in place of its one include
// line, after its fast path.
func TestScriptsAssembled(t *testing.T) {
	consts := "local ENTRY_TTL, RECORD_TTL = " + strconv.FormatInt(entryTTL.Milliseconds(), 10) + ", " +
		strconv.FormatInt(recordTTL.Milliseconds(), 10) + "\n"
	for name, s := range map[string]struct {
		body string
		*script
	}{
		"acquire.lua": {acquireBody, acquireScript}, "acquireall.lua": {acquireAllBody, acquireAllScript},
		"release.lua": {releaseBody, releaseScript}, "extend.lua": {extendBody, extendScript},
		"ttl.lua": {ttlBody, ttlScript}, "poll.lua": {pollBody, pollScript},
	} {
		if n := strings.Count(s.body, libInclude); n != 1 {
			t.Errorf("%s has %d include lines, want 1", name, n)
		}
		if !strings.HasPrefix(s.src, consts) {
			t.Errorf("%s does not start with %q", name, consts)
		}
		if strings.Contains(s.src, libInclude) || !strings.Contains(s.src, "local function fill(") {
			t.Errorf("%s: lib.lua was not included", name)
		}
	}
}
