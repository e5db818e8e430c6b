package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/fencekit/fencekit/internal/wire"
)

// margin is added to every fixture TTL of whole minutes: rounded to the minute, the lease
// left prints the same from margin after the keys are written until 30 s later, which is
// far more than the tests take on a loaded machine. Waits are whole minutes: rounded, they
// print the same for 30 s after the keys are written.
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
	oldestMs     int64 // the oldest live waiter's wait; -1 without a live waiter
	// kind is the holders' kind: exclusive (the zero Kind), held by ownerID with label; or
	// shared or limited, whose holders are listed by token.
	kind    wire.Kind
	label   string
	holders []fixtureHolder
}

// fixtureHolder is one holder of a shared or limited resource of the fixture.
type fixtureHolder struct {
	owner   string // without its label
	label   string
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

// Kinds of the fixture's acquisitions.
var (
	exclusive = wire.Kind{Limit: 1}
	shared    = wire.Kind{Shared: true}
)

// fixtureLocks are the locks prepare writes, awkward names included: braces (base64
// keys), spaces, unicode, colons, a name ending in ":lock", a newline, a token from the
// server-time floor; a shared resource of two holders (one granted from the queue, whose
// owner is its queue element) and a limited one. Some holders and waiters have labels
// (fencing.WithLabel), one with a space.
var fixtureLocks = []fixtureLock{
	{name: "order-42", token: 7, minutes: 10, fence: 7, waiters: 4, oldestMs: 180_000, label: "export-42"},
	{name: "{braced}", token: 3, minutes: 5, fence: 3, fenceMinutes: 30, oldestMs: -1},
	{name: "with space", token: 1, minutes: 20, fence: 1, oldestMs: -1},
	{name: "ünïcode-ключ", token: 12, minutes: 1, fence: 12, oldestMs: -1},
	{name: "a:b:c", token: 2, minutes: 2, fence: 2, oldestMs: -1},
	{name: "x}:lock", token: 4, minutes: 3, fence: 4, waiters: 1, oldestMs: -1},
	{name: "line\nbreak", token: 9, minutes: 4, fence: 9, oldestMs: -1},
	{name: "floor-token", token: 1_800_000_000_000_123, minutes: 6, fence: 1_800_000_000_000_123, oldestMs: -1},
	{name: "report-7", token: 11, minutes: 9, fence: 11, waiters: 2, oldestMs: 120_000, kind: shared, holders: []fixtureHolder{
		{owner: ownerID, token: 10, minutes: 8},
		{owner: element(liveB, 5, 3000, false, 0, shared), label: "report job 11", token: 11, minutes: 9},
	}},
	{name: "pool", token: 5, minutes: 15, fence: 5, oldestMs: -1, kind: wire.Kind{Limit: 3}, holders: []fixtureHolder{
		{owner: ownerID, token: 4, minutes: 11},
		{owner: otherID, label: "worker-2", token: 5, minutes: 15},
	}},
}

// element returns the queue element of a waiter of Locker id: its n-th, whose grant gets a
// lease of leaseMs, tokens floored at the server clock (floor) or a counter that expires
// after expiry, and the kind.
func element(id string, n uint64, leaseMs int64, floor bool, expiry time.Duration, kind wire.Kind) string {
	return wire.Element{Locker: id, Seq: n, Lease: msDuration(leaseMs), Floor: floor, Expiry: expiry, Kind: kind}.String()
}

// Queue elements of the fixture.
var (
	// order-42, held exclusively: a dead waiter at the head, then two live Lockers, one with
	// two shared waiters (the second floored at the server clock), the other with an
	// exclusive waiter whose counter expires after an hour.
	order42Queue = []string{
		element(deadID, 1, 3000, false, 0, exclusive),
		element(liveB, 1, 3000, false, 0, shared),
		wire.Labeled(element(liveC, 4, 2000, true, time.Hour, exclusive), "retry-7"),
		element(liveB, 2, 3000, true, 0, shared),
	}
	// report-7, held shared: a writer waits, and a dead reader behind it.
	report7Queue = []string{
		wire.Labeled(element(liveC, 9, 3000, true, time.Hour, exclusive), "writer-1"),
		element(deadID, 3, 3000, true, 0, shared),
	}
	// x}:lock: only a dead waiter.
	xLockQueue = []string{element(deadID, 1, 3000, false, 0, exclusive)}
)

// idemResource is the resource of the fixture's Echo idempotency record.
const idemResource = ":idem orders POST:/orders key-1"

// prepare writes the fixture under prefix in the key layout of docs/design.md: the locks
// above and their queues, two counters whose locks were released ("idle" without expiry,
// "idle-ttl" with one), a release record, an idempotency record and one key of another
// layout.
func prepare(t testing.TB, client redis.UniversalClient, prefix string) {
	t.Helper()
	ctx := context.Background()
	server, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatalf("prepare: TIME: %v", err)
	}
	minutes := func(n int) time.Duration { return time.Duration(n)*time.Minute + margin }
	ms := func(d time.Duration) string { return strconv.FormatInt(server.Add(d).UnixMilli(), 10) }
	pipe := client.Pipeline()
	for _, l := range fixtureLocks {
		k := wire.For(prefix, l.name)
		if l.kind.Exclusive() {
			v := wire.Value(wire.Labeled(ownerID, l.label), l.token)
			if l.waiters > 0 {
				v += "+" // the mark of a holder with waiters queued behind it
			}
			pipe.Set(ctx, k.Lock, v, minutes(l.minutes))
		} else {
			// The hash of shared or limited holders: its kind, queue mark, the bounds of its
			// holders' leases, its own expiry (twice the latest lease, as the library sets it)
			// and a field per holder, "<lease end ms>:<token>".
			q := "0"
			if l.waiters > 0 {
				q = "1"
			}
			first, last := minutes(l.minutes), minutes(l.minutes)
			for _, h := range l.holders {
				first = min(first, minutes(h.minutes))
			}
			fields := []any{"k", l.kind.Arg(), "q", q, "e", ms(first), "x", ms(last), "t", ms(2 * last)}
			for _, h := range l.holders {
				fields = append(fields, wire.Labeled(h.owner, h.label), ms(minutes(h.minutes))+":"+strconv.FormatInt(h.token, 10))
			}
			pipe.HSet(ctx, k.Lock, fields...)
			pipe.PExpire(ctx, k.Lock, 2*last)
		}
		var ttl time.Duration
		if l.fenceMinutes > 0 {
			ttl = minutes(l.fenceMinutes)
		}
		pipe.Set(ctx, k.Fence, l.fence, ttl)
	}
	// A live waiter's key holds when its Locker began waiting, by its clock.
	waiter := func(ago time.Duration) string { return wire.WaiterValue(server.Add(-ago)) }
	k := wire.For(prefix, "order-42")
	pipe.RPush(ctx, k.Queue, anys(order42Queue)...)
	pipe.PExpire(ctx, k.Queue, minutes(10))
	pipe.Set(ctx, k.Waiter(liveB), waiter(3*time.Minute), minutes(10))
	pipe.Set(ctx, k.Waiter(liveC), waiter(time.Minute), minutes(10))
	k = wire.For(prefix, "report-7")
	pipe.RPush(ctx, k.Queue, anys(report7Queue)...)
	pipe.PExpire(ctx, k.Queue, minutes(10))
	pipe.Set(ctx, k.Waiter(liveC), waiter(2*time.Minute), minutes(10))
	// The record of the release of an exclusive lock of report-7: released.
	pipe.Set(ctx, k.Record(wire.Value(otherID, 9)), "1", minutes(10))
	k = wire.For(prefix, "x}:lock")
	pipe.RPush(ctx, k.Queue, anys(xLockQueue)...)
	pipe.PExpire(ctx, k.Queue, minutes(10))

	pipe.Set(ctx, wire.For(prefix, "idle").Fence, 5, 0)
	pipe.Set(ctx, wire.For(prefix, "idle-ttl").Fence, 8, minutes(40))
	pipe.Set(ctx, wire.For(prefix, idemResource).Memo(echofence.RecordName), "1:3:201:4:abcd0:created", minutes(24*60))
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
