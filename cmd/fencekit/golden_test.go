package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestGolden runs every subcommand on the fixture, on the shared Redis and on a private
// Cluster, and compares the tables with testdata/*.golden (the same files for both) and
// the JSON, parsed back, with the fixture.
func TestGolden(t *testing.T) {
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
		if l.Token != want.token || l.Owner != ownerID || l.Waiters != want.waiters || l.Key != keysFor(tg.prefix, want.name).lock {
			t.Errorf("%q: got %+v, want token %d, owner %s, waiters %d", want.name, l, want.token, ownerID, want.waiters)
		}
		if l.TTLMs <= 0 || l.TTLMs > lease {
			t.Errorf("%q: ttl_ms %d, want in (0, %d]", want.name, l.TTLMs, lease)
		}
		switch {
		case want.oldestMs < 0 && l.OldestWaitMs != nil:
			t.Errorf("%q: oldest_wait_ms %d, want null", want.name, *l.OldestWaitMs)
		case want.oldestMs >= 0 && (l.OldestWaitMs == nil || *l.OldestWaitMs != want.oldestMs):
			t.Errorf("%q: oldest_wait_ms %v, want %d", want.name, l.OldestWaitMs, want.oldestMs)
		}
	}
}

func checkShowJSON(t *testing.T, tg target) {
	r := tg.run(t, exitOK, "show", "--json", "order-42")
	var got showOutput
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v in\n%s", err, r.stdout)
	}
	if got.Lock == nil || got.Lock.Token != 7 || got.Lock.Owner != ownerID || got.Fence.LastToken == nil || *got.Fence.LastToken != 7 || got.Fence.TTLMs != -1 {
		t.Errorf("lock and fence: got %+v, %+v", got.Lock, got.Fence)
	}
	wantIDs := []string{deadID, liveB, liveC, liveB}
	if got.Queue.Length != 4 || len(got.Queue.Entries) != 4 {
		t.Fatalf("queue: got %+v, want 4 entries", got.Queue)
	}
	for i, e := range got.Queue.Entries {
		if e.ID != wantIDs[i] || e.Live != (i > 0) {
			t.Errorf("entry %d: got %s live=%v, want %s live=%v", i, e.ID, e.Live, wantIDs[i], i > 0)
		}
	}
	if e := got.Queue.Entries[2]; e.LeaseMs == nil || *e.LeaseMs != 5000 || !*e.Floor || *e.WaitingMs != 30_000 || *e.SinceUnixMs != testNow.UnixMilli()-30_000 {
		t.Errorf("entry 2: got %+v", e)
	}

	r = tg.run(t, exitNotFound, "show", "idle-ttl", "--json")
	got = showOutput{}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v in\n%s", err, r.stdout)
	}
	if got.Lock != nil || got.Fence.LastToken == nil || *got.Fence.LastToken != 8 || got.Fence.TTLMs <= 0 || got.Fence.TTLMs > (40*time.Minute+margin).Milliseconds() || got.Queue.TTLMs != -2 {
		t.Errorf("idle-ttl: got lock %+v, fence %+v, queue %+v", got.Lock, got.Fence, got.Queue)
	}
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
		"queue":  {2, 2, 0},
		"waiter": {2, 2, 0},
		"other":  {1, 0, 1},
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
	if got.Total.Keys != 2*n+7 || !strings.HasPrefix(got.Prefix, tg.prefix) {
		t.Errorf("total: got %+v, prefix %q", got.Total, got.Prefix)
	}
}
