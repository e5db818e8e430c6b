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
	name string
	// token is the exclusive holder's, or the highest holder's of a hash.
	token int64
	// minutes is the lease (plus margin); for a hash, the latest of its holders'.
	minutes int
	fence   int64
	// fenceMinutes is the counter's TTL (plus margin); 0 for none.
	fenceMinutes int
	waiters      int64
	oldestMs     int64 // -1 without a live waiter
	// kind is the field limit of a shared or limited resource's hash ("shared", or the
	// limit), whose holders are listed by token; "" for an exclusive lock held by ownerID.
	kind    string
	holders []fixtureHolder
}

// fixtureHolder is one holder of a shared or limited resource of the fixture.
type fixtureHolder struct {
	owner   string
	token   int64
	minutes int // lease, plus margin
}

// Waiter ids and owners are 22 characters of base64url, as a Locker's.
const (
	deadID  = "deadAAAAAAAAAAAAAAAAAA"
	liveB   = "liveBBBBBBBBBBBBBBBBBB"
	liveC   = "liveCCCCCCCCCCCCCCCCCC"
	ownerID = "ownerOOOOOOOOOOOOOOOOO"
	otherID = "otherOOOOOOOOOOOOOOOOO"
)

// fixtureLocks are the locks prepare writes, awkward names included: braces (base64
// keys), spaces, unicode, colons, a name ending in ":lock", a newline, a token from the
// server-time floor; a shared resource of two holders (one granted from the queue, whose
// owner is its queue element) and a limited one.
var fixtureLocks = []fixtureLock{
	{name: "order-42", token: 7, minutes: 10, fence: 7, waiters: 4, oldestMs: 90_000},
	{name: "{braced}", token: 3, minutes: 5, fence: 3, fenceMinutes: 30, oldestMs: -1},
	{name: "with space", token: 1, minutes: 20, fence: 1, oldestMs: -1},
	{name: "ünïcode-ключ", token: 12, minutes: 1, fence: 12, oldestMs: -1},
	{name: "a:b:c", token: 2, minutes: 2, fence: 2, oldestMs: -1},
	{name: "x}:lock", token: 4, minutes: 3, fence: 4, waiters: 1, oldestMs: -1},
	{name: "line\nbreak", token: 9, minutes: 4, fence: 9, oldestMs: -1},
	{name: "floor-token", token: 1_800_000_000_000_123, minutes: 6, fence: 1_800_000_000_000_123, oldestMs: -1},
	{name: "report-7", token: 11, minutes: 9, fence: 11, waiters: 2, oldestMs: 45_000, kind: "shared", holders: []fixtureHolder{
		{owner: ownerID, token: 10, minutes: 8},
		{owner: liveB + ".5.3000s", token: 11, minutes: 9},
	}},
	{name: "pool", token: 5, minutes: 15, fence: 5, oldestMs: -1, kind: "3", holders: []fixtureHolder{
		{owner: ownerID, token: 4, minutes: 11},
		{owner: otherID, token: 5, minutes: 15},
	}},
}

// Queue elements of the fixture, "<id>.<n>.<lease ms><rules>".
var (
	// order-42, held exclusively: a dead waiter at the head, then two live Lockers, one with
	// two shared waiters (the second floored at the server clock), the other with an
	// exclusive waiter whose counter expires after an hour.
	order42Queue = []string{deadID + ".1.3000", liveB + ".1.3000s", liveC + ".4.2000e3600000", liveB + ".2.3000fs"}
	// report-7, held shared: a writer waits, and a dead reader behind it.
	report7Queue = []string{liveC + ".9.3000e3600000", deadID + ".3.3000fs"}
	// x}:lock: only a dead waiter.
	xLockQueue = []string{deadID + ".1.3000"}
)

// idemResource is the resource of the fixture's Echo idempotency record.
const idemResource = ":idem orders POST:/orders key-1"

// prepare writes the fixture under prefix: the locks above and their queues, two counters
// whose locks were released ("idle" without expiry, "idle-ttl" with one), a release record,
// an idempotency record and one key of another layout.
func prepare(t testing.TB, client redis.UniversalClient, prefix string) {
	t.Helper()
	ctx := context.Background()
	server, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatalf("prepare: TIME: %v", err)
	}
	min := func(n int) time.Duration { return time.Duration(n)*time.Minute + margin }
	pipe := client.Pipeline()
	for _, l := range fixtureLocks {
		k := keysFor(prefix, l.name)
		if l.kind == "" {
			pipe.Set(ctx, k.lock, ownerID+":"+strconv.FormatInt(l.token, 10), min(l.minutes))
		} else {
			// The key's bookkeeping, as the library writes it: its expiry and its queue mark.
			fields := []any{"limit", l.kind, "until", server.Add(min(l.minutes)).UnixMilli(), "q", "1"}
			for _, h := range l.holders {
				end := server.Add(min(h.minutes)).UnixMilli()
				fields = append(fields, h.owner+":"+strconv.FormatInt(h.token, 10), end)
			}
			pipe.HSet(ctx, k.lock, fields...)
			pipe.PExpire(ctx, k.lock, min(l.minutes))
		}
		var ttl time.Duration
		if l.fenceMinutes > 0 {
			ttl = min(l.fenceMinutes)
		}
		pipe.Set(ctx, k.fence, l.fence, ttl)
	}
	waiter := func(ago time.Duration) string {
		return fmt.Sprintf("3000:0:%d", testNow.Add(-ago).UnixMilli())
	}
	k := keysFor(prefix, "order-42")
	pipe.RPush(ctx, k.queue, anys(order42Queue)...)
	pipe.PExpire(ctx, k.queue, min(10))
	pipe.Set(ctx, k.waiter(liveB), waiter(90*time.Second), min(10))
	pipe.Set(ctx, k.waiter(liveC), waiter(30*time.Second), min(10))
	k = keysFor(prefix, "report-7")
	pipe.RPush(ctx, k.queue, anys(report7Queue)...)
	pipe.PExpire(ctx, k.queue, min(10))
	pipe.Set(ctx, k.waiter(liveC), waiter(45*time.Second), min(10))
	// The release of an exclusive lock of report-7 that granted it to a shared waiter.
	pipe.Set(ctx, k.base+suffixRecord+otherID+":9", "2:"+liveB+".5.3000s:11", min(10))
	k = keysFor(prefix, "x}:lock")
	pipe.RPush(ctx, k.queue, anys(xLockQueue)...)
	pipe.PExpire(ctx, k.queue, min(10))

	pipe.Set(ctx, keysFor(prefix, "idle").fence, 5, 0)
	pipe.Set(ctx, keysFor(prefix, "idle-ttl").fence, 8, min(40))
	pipe.Set(ctx, keysFor(prefix, idemResource).base+suffixIdem, "1:3:201:4:abcd0:created", min(24*60))
	pipe.Set(ctx, prefix+"unrelated", "x", 0)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("prepare: %v", err)
	}
}

// anys converts strings to the arguments of a command.
func anys(s []string) []any {
	a := make([]any, len(s))
	for i, v := range s {
		a[i] = v
	}
	return a
}
