package main

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// margin is added to every fixture TTL of whole minutes: rounded to the minute, the lease
// left prints the same from margin after the keys are written until 30 s later, which is
// far more than the tests take on a loaded machine.
const margin = 25 * time.Second

// fixtureLock is one lock of the fixture.
type fixtureLock struct {
	name    string
	token   int64
	minutes int // lease, plus margin
	fence   int64
	// fenceMinutes is the counter's TTL (plus margin); 0 for none.
	fenceMinutes int
	waiters      int64
	oldestMs     int64 // -1 without a live waiter
}

// Waiter ids are 22 characters of base64url, as a Locker's.
const (
	deadID  = "deadAAAAAAAAAAAAAAAAAA"
	liveB   = "liveBBBBBBBBBBBBBBBBBB"
	liveC   = "liveCCCCCCCCCCCCCCCCCC"
	ownerID = "ownerOOOOOOOOOOOOOOOOO"
)

// fixtureLocks are the locks prepare writes, awkward names included: braces (base64
// keys), spaces, unicode, colons, a name ending in ":lock", a newline, a token from the
// server-time floor.
var fixtureLocks = []fixtureLock{
	{name: "order-42", token: 7, minutes: 10, fence: 7, waiters: 4, oldestMs: 90_000},
	{name: "{braced}", token: 3, minutes: 5, fence: 3, fenceMinutes: 30, oldestMs: -1},
	{name: "with space", token: 1, minutes: 20, fence: 1, oldestMs: -1},
	{name: "ünïcode-ключ", token: 12, minutes: 1, fence: 12, oldestMs: -1},
	{name: "a:b:c", token: 2, minutes: 2, fence: 2, oldestMs: -1},
	{name: "x}:lock", token: 4, minutes: 3, fence: 4, waiters: 1, oldestMs: -1},
	{name: "line\nbreak", token: 9, minutes: 4, fence: 9, oldestMs: -1},
	{name: "floor-token", token: 1_800_000_000_000_123, minutes: 6, fence: 1_800_000_000_000_123, oldestMs: -1},
}

// prepare writes the fixture under prefix: the locks above, two counters whose locks were
// released ("idle" without expiry, "idle-ttl" with one) and one key of another layout.
func prepare(t testing.TB, client redis.UniversalClient, prefix string) {
	t.Helper()
	ctx := context.Background()
	min := func(n int) time.Duration { return time.Duration(n)*time.Minute + margin }
	pipe := client.Pipeline()
	for _, l := range fixtureLocks {
		k := keysFor(prefix, l.name)
		pipe.Set(ctx, k.lock, ownerID+":"+strconv.FormatInt(l.token, 10), min(l.minutes))
		var ttl time.Duration
		if l.fenceMinutes > 0 {
			ttl = min(l.fenceMinutes)
		}
		pipe.Set(ctx, k.fence, l.fence, ttl)
	}
	// order-42: a dead waiter at the head, then two live Lockers, one with two waiters.
	k := keysFor(prefix, "order-42")
	pipe.RPush(ctx, k.queue, deadID, liveB, liveC, liveB)
	pipe.PExpire(ctx, k.queue, min(10))
	pipe.Set(ctx, k.waiter(liveB), fmt.Sprintf("30000:0:%d", testNow.UnixMilli()-90_000), min(10))
	pipe.Set(ctx, k.waiter(liveC), fmt.Sprintf("5000:1:%d", testNow.UnixMilli()-30_000), min(10))
	// x}:lock: only a dead waiter.
	k = keysFor(prefix, "x}:lock")
	pipe.RPush(ctx, k.queue, deadID)
	pipe.PExpire(ctx, k.queue, min(10))

	pipe.Set(ctx, keysFor(prefix, "idle").fence, 5, 0)
	pipe.Set(ctx, keysFor(prefix, "idle-ttl").fence, 8, min(40))
	pipe.Set(ctx, prefix+"unrelated", "x", 0)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("prepare: %v", err)
	}
}
