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
		res, err := acquireScript.Run(t.Context(), r.Client, k.script(), owner, 30000, "P0").Result()
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

// TestEntryTTLConstant checks that grant.lua's ENTRY_TTL spells entryTTL.
func TestEntryTTLConstant(t *testing.T) {
	want := "local ENTRY_TTL = " + strconv.FormatInt(entryTTL.Milliseconds(), 10) + "\n"
	if !strings.Contains(grantSrc, want) {
		t.Fatalf("grant.lua lacks %q", want)
	}
}

// TestGrantIncluded checks that every script that can grant a free lock took grant.lua's
// functions in place of its include line.
func TestGrantIncluded(t *testing.T) {
	for name, body := range map[string]string{"acquire.lua": acquireBody, "release.lua": releaseBody, "poll.lua": pollBody} {
		if n := strings.Count(body, grantInclude); n != 1 {
			t.Errorf("%s has %d include lines, want 1", name, n)
		}
		if src := withGrant(body); strings.Contains(src, grantInclude) || !strings.Contains(src, "local function grant_next(") {
			t.Errorf("%s: grant.lua was not included", name)
		}
	}
}

// TestLimitIncluded checks that every script of a limited resource took limit.lua's
// functions, and grant.lua's where it grants, in place of their include lines.
func TestLimitIncluded(t *testing.T) {
	for name, body := range map[string]string{
		"limit_acquire.lua": limitAcquireBody, "limit_release.lua": limitReleaseBody, "limit_poll.lua": limitPollBody,
		"limit_extend.lua": limitExtendBody, "limit_ttl.lua": limitTTLBody,
	} {
		if n := strings.Count(body, limitInclude); n != 1 {
			t.Errorf("%s has %d limit.lua include lines, want 1", name, n)
		}
		src := withLimit(body)
		if strings.Contains(src, limitInclude) || strings.Contains(src, grantInclude) || !strings.Contains(src, "local function holders(") {
			t.Errorf("%s: limit.lua was not included", name)
		}
		if strings.Contains(body, grantInclude) && strings.Index(body, grantInclude) > strings.Index(body, limitInclude) {
			t.Errorf("%s: grant.lua must come before limit.lua, whose fill calls grant_next", name)
		}
	}
}
