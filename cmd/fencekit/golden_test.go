package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/wire"
)

// TestGolden runs every subcommand on the fixture, on the shared Redis and on a private
// Cluster, and compares the tables with testdata/*.golden (the same files for both) and
// the JSON, parsed back, with the fixture.
func TestGolden(t *testing.T) {
	t.Parallel()
	forTargets(t, func(t *testing.T, tg target) {
		prepare(t, tg.client, tg.prefix)
		prefix := []string{tg.prefix, "fencing:"}

		r := tg.run(t, exitOK, "locks")
		golden(t, "locks.golden", r.stdout, prefix...)
		if r.stderr != "" {
			t.Errorf("locks: stderr %q, want none", r.stderr)
		}
		r = tg.run(t, exitOK, "locks", "--match", "*[{}]*")
		golden(t, "locks-match.golden", r.stdout, prefix...)
		r = tg.run(t, exitOK, "show", "order-42")
		golden(t, "show-order-42.golden", r.stdout, prefix...)
		r = tg.run(t, exitOK, "show", "{braced}")
		golden(t, "show-braced.golden", r.stdout, prefix...)
		r = tg.run(t, exitOK, "show", "report-7")
		golden(t, "show-report-7.golden", r.stdout, prefix...)
		r = tg.run(t, exitOK, "show", "pool")
		golden(t, "show-pool.golden", r.stdout, prefix...)
		r = tg.run(t, exitNotFound, "show", "idle-ttl")
		golden(t, "show-idle-ttl.golden", r.stdout, prefix...)
		r = tg.run(t, exitNotFound, "show", "never-locked")
		golden(t, "show-never-locked.golden", r.stdout, prefix...)
		r = tg.run(t, exitOK, "stats")
		golden(t, "stats.golden", memoryColumn.ReplaceAllString(r.stdout, "<size>  "), prefix...)

		t.Run("locks-json", func(t *testing.T) { checkLocksJSON(t, tg) })
		t.Run("show-json", func(t *testing.T) { checkShowJSON(t, tg) })
		t.Run("stats-json", func(t *testing.T) { checkStatsJSON(t, tg) })
	})
}

func checkLocksJSON(t *testing.T, tg target) {
	r := tg.run(t, exitOK, "locks", "--json")
	var got locksOutput
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v in\n%s", err, r.stdout)
	}
	if len(got.Locks) != len(fixtureLocks) {
		t.Fatalf("got %d locks, want %d", len(got.Locks), len(fixtureLocks))
	}
	byName := map[string]lockInfo{}
	for i, l := range got.Locks {
		byName[l.Resource] = l
		if i > 0 && l.TTLMs < got.Locks[i-1].TTLMs {
			t.Errorf("lock %d (%q) has %d ms left, less than the one before: not sorted", i, l.Resource, l.TTLMs)
		}
	}
	for _, want := range fixtureLocks {
		l, ok := byName[want.name]
		if !ok {
			t.Errorf("%q missing", want.name)
			continue
		}
		lease := int64(want.minutes)*60_000 + margin.Milliseconds()
		if l.Token != want.token || l.Waiters != want.waiters || l.Key != wire.For(tg.prefix, want.name).Lock {
			t.Errorf("%q: got %+v, want token %d, waiters %d", want.name, l, want.token, want.waiters)
		}
		if v := wire.Value(wire.Labeled(ownerID, want.label), want.token); want.kind.Exclusive() && (l.Value != v || l.Label != want.label) {
			t.Errorf("%q: value %q, label %q; want %q, %q", want.name, l.Value, l.Label, v, want.label)
		}
		if !equalLabels(l.WaiterLabels, wantWaiterLabels[want.name]) {
			t.Errorf("%q: waiter_labels %q, want %q", want.name, l.WaiterLabels, wantWaiterLabels[want.name])
		}
		checkMode(t, want, l.Mode, l.Limit, l.Owner, l.Holders)
		if l.TTLMs <= 0 || l.TTLMs > lease {
			t.Errorf("%q: ttl_ms %d, want in (0, %d]", want.name, l.TTLMs, lease)
		}
		switch {
		case want.oldestMs < 0 && l.OldestWaitMs != nil:
			t.Errorf("%q: oldest_wait_ms %d, want null", want.name, *l.OldestWaitMs)
		case want.oldestMs >= 0 && !waited(l.OldestWaitMs, want.oldestMs):
			t.Errorf("%q: oldest_wait_ms %v, want %d ms or a little more", want.name, deref(l.OldestWaitMs), want.oldestMs)
		}
	}
}

// waited reports whether a wait read from Redis, got, is the fixture's wait of ms: that
// much, and at most 30 s more, the time the test may take since prepare.
func waited(got *int64, ms int64) bool {
	return got != nil && *got >= ms && *got < ms+30_000
}

// deref returns *p, or nil: for messages.
func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// checkMode checks a lock's mode, limit, owner and holders in JSON against the fixture.
func checkMode(t *testing.T, want fixtureLock, mode string, limit int, owner string, holders []holderInfo) {
	t.Helper()
	wantMode, wantLimit, wantOwner := modeExclusive, 0, wire.Labeled(ownerID, want.label)
	switch {
	case want.kind.Shared:
		wantMode, wantOwner = modeShared, ""
	case !want.kind.Exclusive():
		wantMode, wantLimit, wantOwner = modeLimit, want.kind.Limit, ""
	}
	if mode != wantMode || limit != wantLimit || owner != wantOwner {
		t.Errorf("%q: got mode %q, limit %d, owner %q; want %q, %d, %q", want.name, mode, limit, owner, wantMode, wantLimit, wantOwner)
	}
	if len(holders) != len(want.holders) {
		t.Fatalf("%q: got holders %+v, want %d", want.name, holders, len(want.holders))
	}
	for i, h := range holders {
		w := want.holders[i]
		lease := int64(w.minutes)*60_000 + margin.Milliseconds()
		if h.Owner != wire.Labeled(w.owner, w.label) || h.Label != w.label || h.Token != w.token || h.TTLMs <= lease-60_000 || h.TTLMs > lease {
			t.Errorf("%q: holder %d: got %+v, want owner %s, label %q, token %d, ttl_ms in (%d, %d]", want.name, i, h, w.owner, w.label, w.token, lease-60_000, lease)
		}
	}
}

// fixtureLockNamed returns the fixture's lock of that name.
func fixtureLockNamed(t *testing.T, name string) fixtureLock {
	t.Helper()
	for _, l := range fixtureLocks {
		if l.name == name {
			return l
		}
	}
	t.Fatalf("no fixture lock %q", name)
	return fixtureLock{}
}

func checkShowJSON(t *testing.T, tg target) {
	r := tg.run(t, exitOK, "show", "--json", "order-42")
	var got showOutput
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v in\n%s", err, r.stdout)
	}
	owner := wire.Labeled(ownerID, "export-42")
	if got.Lock == nil || got.Lock.Mode != modeExclusive || got.Lock.Token != 7 || got.Lock.Owner != owner || got.Lock.Label != "export-42" || got.Lock.Value != wire.Value(owner, 7) || got.Lock.Holders != nil ||
		got.Fence.LastToken == nil || *got.Fence.LastToken != 7 || got.Fence.NextToken != 8 || got.Fence.TTLMs != -1 {
		t.Errorf("lock and fence: got %+v, %+v", got.Lock, got.Fence)
	}
	if k := wire.For(tg.prefix, "order-42"); got.Keys.Lock != k.Lock || got.Keys.Fence != k.Fence || got.Keys.Queue != k.Queue {
		t.Errorf("keys: got %+v", got.Keys)
	}
	ptr := func(n int64) *int64 { return &n }
	checkQueue(t, got.Queue, []entry{
		{id: deadID, mode: modeExclusive},
		{id: liveB, mode: modeShared, live: true, waitingMs: ptr(180_000)},
		{id: liveC, label: "retry-7", mode: modeExclusive, live: true, floor: true, expiry: ptr(3_600_000), waitingMs: ptr(60_000)},
		{id: liveB, mode: modeShared, live: true, floor: true, waitingMs: ptr(180_000)},
	})

	for _, name := range []string{"report-7", "pool"} {
		r = tg.run(t, exitOK, "show", "--json", name)
		got = showOutput{}
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("%v in\n%s", err, r.stdout)
		}
		want := fixtureLockNamed(t, name)
		if got.Lock == nil {
			t.Fatalf("%s: no lock in\n%s", name, r.stdout)
		}
		checkMode(t, want, got.Lock.Mode, got.Lock.Limit, got.Lock.Owner, got.Lock.Holders)
		lease := int64(want.minutes)*60_000 + margin.Milliseconds()
		if got.Lock.Token != want.token || got.Lock.Value != "" || got.Lock.TTLMs <= lease-60_000 || got.Lock.TTLMs > lease {
			t.Errorf("%s: got %+v, want token %d, no value, the latest lease", name, got.Lock, want.token)
		}
		if name == "pool" {
			checkQueue(t, got.Queue, nil)
			continue
		}
		checkQueue(t, got.Queue, []entry{
			{id: liveC, label: "writer-1", mode: modeExclusive, live: true, floor: true, expiry: ptr(3_600_000), waitingMs: ptr(120_000)},
			{id: deadID, mode: modeShared, floor: true},
		})
	}

	r = tg.run(t, exitNotFound, "show", "idle-ttl", "--json")
	got = showOutput{}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v in\n%s", err, r.stdout)
	}
	if got.Lock != nil || got.Fence.LastToken == nil || *got.Fence.LastToken != 8 || got.Fence.TTLMs <= 0 || got.Fence.TTLMs > (40*time.Minute+margin).Milliseconds() || got.Queue.Length != 0 || len(got.Queue.Entries) != 0 {
		t.Errorf("idle-ttl: got lock %+v, fence %+v, queue %+v", got.Lock, got.Fence, got.Queue)
	}
	r = tg.run(t, exitNotFound, "show", "never-locked", "--json")
	got = showOutput{}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v in\n%s", err, r.stdout)
	}
	if got.Lock != nil || got.Fence.LastToken != nil || got.Fence.NextToken != 1 || got.Fence.TTLMs != -2 || got.Queue.Entries == nil {
		t.Errorf("never-locked: got lock %+v, fence %+v, queue %+v", got.Lock, got.Fence, got.Queue)
	}
}

// entry is a queue entry wanted: waitingMs is the fixture's wait, nil for a dead waiter.
type entry struct {
	id, label, mode   string
	limit             int
	live, floor       bool
	expiry, waitingMs *int64
}

// checkQueue checks a queue's entries against the entries wanted.
func checkQueue(t *testing.T, q queueState, want []entry) {
	t.Helper()
	if q.Length != int64(len(want)) || len(q.Entries) != len(want) {
		t.Fatalf("queue: got %+v, want %d entries", q, len(want))
	}
	for i, e := range q.Entries {
		w := want[i]
		ok := e.Position == i && e.ID == w.id && e.Label == w.label && e.Mode == w.mode && e.Limit == w.limit && e.Live == w.live && e.Floor == w.floor &&
			equalPtr(e.CounterExpiryMs, w.expiry) && (w.waitingMs == nil) == (e.WaitingMs == nil)
		if !ok || (w.waitingMs != nil && !waited(e.WaitingMs, *w.waitingMs)) {
			t.Errorf("entry %d: got %+v (waiting %v), want %+v (waiting %v)", i, e, deref(e.WaitingMs), w, deref(w.waitingMs))
		}
	}
}

// wantWaiterLabels are the labels of the fixture's waiters, by resource, as locks --json
// prints them.
var wantWaiterLabels = map[string][]string{
	"order-42": {"", "", "retry-7", ""},
	"report-7": {"writer-1", ""},
	"x}:lock":  {""},
}

func equalLabels(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || strings.Join(a, "\x00") == strings.Join(b, "\x00"))
}

func equalPtr[T comparable](a, b *T) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

func checkStatsJSON(t *testing.T, tg target) {
	r := tg.run(t, exitOK, "stats", "--json")
	var got statsOutput
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v in\n%s", err, r.stdout)
	}
	n := int64(len(fixtureLocks))
	want := map[string][3]int64{ // keys, with TTL, without
		"lock":   {n, n, 0},
		"fence":  {n + 2, 2, n},
		"queue":  {3, 3, 0},
		"waiter": {3, 3, 0},
		"record": {1, 1, 0},
		"idem":   {1, 1, 0},
		"other":  {1, 0, 1},
	}
	if len(got.Kinds) != len(want) {
		t.Errorf("got %d kinds, want %d", len(got.Kinds), len(want))
	}
	for _, k := range got.Kinds {
		w := want[k.Kind]
		if k.Keys != w[0] || k.WithTTL != w[1] || k.WithoutTTL != w[2] {
			t.Errorf("%s: got %d keys, %d with TTL, %d without; want %v", k.Kind, k.Keys, k.WithTTL, k.WithoutTTL, w)
		}
		if k.Keys > 0 && (k.Sampled != k.Keys || k.SampleBytes <= 0 || k.EstimatedBytes != k.SampleBytes) {
			t.Errorf("%s: sampled %d of %d keys, %d bytes, estimated %d", k.Kind, k.Sampled, k.Keys, k.SampleBytes, k.EstimatedBytes)
		}
	}
	if got.Total.Keys != 2*n+11 || !strings.HasPrefix(got.Prefix, tg.prefix) {
		t.Errorf("total: got %+v, prefix %q", got.Total, got.Prefix)
	}
}
