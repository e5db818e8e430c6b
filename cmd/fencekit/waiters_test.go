package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/wire"
)

// TestWaiters queues waiters with the library behind an exclusive holder (an exclusive one
// whose counter expires, a shared one floored at the server clock) and behind the full slots
// of a limit, and writes a dead waiter's element behind them (a process killed while it
// waited: its Locker's waiter key is gone); it checks that show and locks report each
// waiter's kind and rules, whether it is alive and how long it has waited.
func TestWaiters(t *testing.T) {
	t.Parallel()
	forTargets(t, func(t *testing.T, tg target) {
		ctx := context.Background()
		l := tg.locker(t)
		lock, err := l.TryAcquire(ctx, "batch", fencing.WithTTL(time.Hour), fencing.WithLabel("nightly batch"))
		if err != nil {
			t.Fatal(err)
		}
		// Released after the waiters' Acquire calls end (cleanups run last first).
		t.Cleanup(func() { _ = lock.Release(ctx) })
		wait(t, l, "writer", tg.locker(t, fencing.WithCounterExpiry(time.Hour)), "batch", 1, fencing.WithLabel("writer-9"))
		wait(t, l, "reader", tg.locker(t, fencing.WithServerTimeFloor()), "batch", 2, fencing.Shared())
		if err := tg.client.RPush(ctx, wire.For(tg.prefix, "batch").Queue, element(deadID, 1, 3000, false, 0, exclusive)).Err(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			slot, err := l.TryAcquire(ctx, "slots", fencing.WithLimit(2), fencing.WithTTL(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = slot.Release(ctx) })
		}
		wait(t, l, "slot waiter", tg.locker(t), "slots", 1, fencing.WithLimit(2), fencing.WithLabel("slot-job"))

		// Waits are read at once: well under a minute, which the tables round them to.
		waiting := func(ms int64) *int64 { return &ms }
		hour := time.Hour.Milliseconds()
		r := tg.run(t, exitOK, "show", "--json", "batch")
		var show showOutput
		if err := json.Unmarshal([]byte(r.stdout), &show); err != nil {
			t.Fatalf("%v in\n%s", err, r.stdout)
		}
		e := show.Queue.Entries
		if len(e) == 3 && (len(e[0].ID) != 22 || len(e[1].ID) != 22 || e[0].ID == e[1].ID) {
			t.Errorf("show --json: the live waiters' Locker ids: %q, %q", e[0].ID, e[1].ID)
		}
		if len(e) == 3 {
			checkQueue(t, show.Queue, []entry{
				{id: e[0].ID, label: "writer-9", mode: modeExclusive, live: true, floor: true, expiry: &hour, waitingMs: waiting(0)},
				{id: e[1].ID, mode: modeShared, live: true, floor: true, waitingMs: waiting(0)},
				{id: deadID, mode: modeExclusive},
			})
		} else {
			t.Fatalf("show --json: got %+v, want 3 waiters", show.Queue)
		}
		r = tg.run(t, exitOK, "show", "batch")
		for _, want := range []string{
			"Queue:       3 waiter(s) queued, 2 alive\n",
			", label nightly batch\n",
			"  POS  LOCKER                  LABEL     MODE       LIVE  FLOOR           WAITING\n",
			"  0    " + e[0].ID + "  writer-9  exclusive  yes   yes, expiry 1h  0s\n",
			"  1    " + e[1].ID + "  -         shared     yes   yes             0s\n",
			"  2    " + deadID + "  -         exclusive  no    no              -\n",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("show: no line %q in\n%s", want, r.stdout)
			}
		}

		r = tg.run(t, exitOK, "show", "--json", "slots")
		show = showOutput{}
		if err := json.Unmarshal([]byte(r.stdout), &show); err != nil {
			t.Fatalf("%v in\n%s", err, r.stdout)
		}
		if len(show.Queue.Entries) == 1 {
			checkQueue(t, show.Queue, []entry{{id: show.Queue.Entries[0].ID, label: "slot-job", mode: modeLimit, limit: 2, live: true, waitingMs: waiting(0)}})
		} else {
			t.Fatalf("show --json slots: got %+v, want 1 waiter", show.Queue)
		}
		r = tg.run(t, exitOK, "show", "slots")
		if !strings.Contains(r.stdout, "  0    "+show.Queue.Entries[0].ID+"  slot-job  limit 2  yes   no     0s\n") {
			t.Errorf("show slots: got\n%s", r.stdout)
		}

		r = tg.run(t, exitOK, "locks", "--json")
		var locks locksOutput
		if err := json.Unmarshal([]byte(r.stdout), &locks); err != nil {
			t.Fatalf("%v in\n%s", err, r.stdout)
		}
		got := map[string]lockInfo{}
		for _, l := range locks.Locks {
			got[l.Resource] = l
		}
		if b := got["batch"]; b.Waiters != 3 || !waited(b.OldestWaitMs, 0) || b.Token != lock.Token() || b.Mode != modeExclusive || b.Label != "nightly batch" || !equalLabels(b.WaiterLabels, []string{"writer-9", "", ""}) {
			t.Errorf("locks --json: batch: got %+v, want 3 waiters and the oldest wait", b)
		}
		if s := got["slots"]; s.Waiters != 1 || !waited(s.OldestWaitMs, 0) || s.Mode != modeLimit || len(s.Holders) != 2 {
			t.Errorf("locks --json: slots: got %+v, want 1 waiter and the oldest wait", s)
		}
		r = tg.run(t, exitOK, "locks")
		for row, want := range map[string]int{`batch +exclusive +1 +nightly batch +1h +3 +0s +writer-9`: 1, `slots \(2/2\) +limit 2 +[12] +- +1h +1 +0s +slot-job`: 2} {
			if n := len(regexp.MustCompile(`(?m)^`+row+`$`).FindAllString(r.stdout, -1)); n != want {
				t.Errorf("locks: %d rows %s, want %d, in\n%s", n, row, want, r.stdout)
			}
		}
	})
}
