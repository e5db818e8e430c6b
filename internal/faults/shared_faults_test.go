package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/testkit/redisproc"
	"github.com/fencekit/fencekit/internal/wire"
)

// sharedSection is one ENTER line of a loop child (see childLoop).
type sharedSection struct {
	proc      string
	kind      string // "r" or "w"
	token     int64
	entered   int64 // server µs
	until     int64 // the end of the lease by the holder's reckoning, Unix µs
	conflicts int64 // -1: entered after its own lease ended
}

// sharedWrite is one WRITE line of a loop child.
type sharedWrite struct {
	proc          string
	kind          string
	token         int64
	sent, done    int64 // Unix µs
	outcome, mark string
}

// sharedRecords parses the ENTER, WRITE and DONE lines of procs.
func sharedRecords(procs []*sharedProc) (sections []sharedSection, writes []sharedWrite, dones map[string][]string) {
	dones = map[string][]string{}
	for _, p := range procs {
		for _, f := range p.snapshot() {
			switch {
			case verb("ENTER")(f) && len(f) == 8:
				sections = append(sections, sharedSection{p.name, f[1], atoi64(f[2]), atoi64(f[3]), atoi64(f[4]), atoi64(f[7])})
			case verb("WRITE")(f) && len(f) == 7:
				writes = append(writes, sharedWrite{p.name, f[1], atoi64(f[2]), atoi64(f[3]), atoi64(f[4]), f[5], f[6]})
			case verb("DONE")(f) && len(f) >= 4:
				dones[f[1]+":"+f[2]] = f[3:]
			}
		}
	}
	return sections, writes, dones
}

// openSections returns the tokens of p's sections that have no DONE line yet.
func openSections(p *sharedProc) []int64 {
	var open []int64
	for _, f := range p.snapshot() {
		switch {
		case verb("ENTER")(f):
			open = append(open, atoi64(f[2]))
		case verb("DONE")(f):
			open = slices.DeleteFunc(open, func(tok int64) bool { return tok == atoi64(f[2]) })
		}
	}
	return open
}

// leaseEnd returns the end of the lease (server ms) of the shared holder with token in the
// lock hash key, or 0 when the hash has no such holder.
func leaseEnd(t *testing.T, client redis.UniversalClient, key string, token int64) int64 {
	t.Helper()
	fields, err := client.HGetAll(context.Background(), key).Result()
	if err != nil && !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatal(err)
	}
	_, holders, _ := wire.HashHolders(fields)
	for _, h := range holders {
		if h.Token == token {
			return h.End.UnixMilli()
		}
	}
	return 0
}

// TestSharedReadersKilledAndStopped runs three reader processes (two goroutines each, Do with
// Shared and a 1s lease, sections of 40–80 ms) and a writer process (Do, exclusive, sections
// of 5–10 ms) on one resource; every section records its entry and its lease with
// sharedCheck, and writes the resource's one record in a fenced store in Redis (store.Redis:
// a write with a token below the record's mark is refused) as it ends, with a context that
// is never cancelled: a write already on its way. Readers are SIGKILLed (and replaced) and
// SIGSTOPped for 1.5–2.5 s, past their lease, six times in all, one at a time, in the middle
// of a section or at a random point (perhaps while they wait in the queue).
//
// It checks that no writer entered its section while a reader's lease was valid, nor a reader
// while the writer's was (sharedCheck, by the server's clock: see sharedCheckScript for why
// the comparison is sound); that writers' and readers' tokens follow the order in which they
// entered; that the store accepted no write with a token below one it had accepted before
// (every writer's write accepted, and every write of a stopped reader that resumed after a
// writer had written refused with ErrStaleToken, with Do reporting ErrNotHeld); that a killed
// reader's place in the lock frees when its lease ends (by the server's clock), for the
// writer within a second after. At the end one more reader is killed in a section and the
// others stop: nobody touches the lock any more, and its key must go by itself within
// 2×TTL+1s of the kill (the hash key outlives its last lease by up to that lease again, see
// lib.lua). The random choices are logged with their seed when a check fails.
//
// The readers write the one record too, because the late write under test is a reader's;
// readers that hold together then refuse each other's older writes as well (counted apart:
// a reader would not write a resource others read beside it, see WithLimit's note on store
// checks).
func TestSharedReadersKilledAndStopped(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	if procState(os.Getpid()) == 0 {
		t.Skip("needs /proc to confirm that a reader process is stopped")
	}
	const (
		ttl         = time.Second
		readerProcs = 3
	)
	s := redisproc.Start(t)
	client := s.Client(t)
	ctx := context.Background()
	checkPrefix := prefix(t) + "{check}:"
	check := newSharedCheck(checkPrefix)
	lock := lockKey(t, "res")
	base := childSettings{role: "loop", addrs: []string{s.Addr()}, prefix: prefix(t), resource: "res", ttl: ttl,
		backoff: [2]time.Duration{10 * time.Millisecond, 50 * time.Millisecond}, store: prefix(t) + "store:res", check: checkPrefix}
	readers := base
	readers.shared, readers.goroutines, readers.hold = true, 2, [2]time.Duration{40 * time.Millisecond, 80 * time.Millisecond}
	writerSettings := base
	writerSettings.goroutines = 1
	writerSettings.hold, writerSettings.gap = [2]time.Duration{5 * time.Millisecond, 10 * time.Millisecond}, [2]time.Duration{5 * time.Millisecond, 15 * time.Millisecond}

	var all []*sharedProc
	procs := make([]*sharedProc, readerProcs)
	for i := range procs {
		procs[i] = startShared(t, fmt.Sprintf("reader %d.0", i), readers)
		all = append(all, procs[i])
	}
	writer := startShared(t, "writer", writerSettings)
	all = append(all, writer)
	// writerIn waits for the writer's first section that it entered at or after the server
	// time after (µs), and returns it.
	writerIn := func(after int64, d time.Duration, what string) sharedSection {
		t.Helper()
		_, f := writer.await(t, 0, d, what, func(f []string) bool { return verb("ENTER")(f) && atoi64(f[3]) >= after })
		return sharedSection{writer.name, f[1], atoi64(f[2]), atoi64(f[3]), atoi64(f[4]), atoi64(f[7])}
	}
	writerIn(0, 30*time.Second, "a first section")
	for _, p := range procs {
		p.await(t, 0, 30*time.Second, "a first section", verb("ENTER", "r"))
	}

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)
	type freed struct {
		afterKill time.Duration // from the SIGKILL to the end of the killed reader's lease
		writerIn  time.Duration // from the end of that lease to the writer's entry
	}
	var frees []freed
	kills, stops, midSection := 0, 0, 0
	begin := time.Now()
	for n, fault := range []string{"kill-section", "stop-section", "kill", "stop", "kill-section", "stop-section"} {
		i := rng.IntN(readerProcs)
		p := procs[i]
		if strings.HasSuffix(fault, "-section") {
			p.await(t, len(p.snapshot()), 10*time.Second, "a section", verb("ENTER", "r"))
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond) // a point inside the section
		} else {
			time.Sleep(time.Duration(50+rng.IntN(250)) * time.Millisecond)
		}
		if strings.HasPrefix(fault, "kill") {
			p.signal(t, syscall.SIGKILL)
			killed := time.Now()
			if !p.exited(10 * time.Second) {
				t.Fatalf("%s did not exit after SIGKILL", p.name)
			}
			kills++
			// The sections it was in keep their places in the lock until their leases end.
			var last int64
			for _, tok := range openSections(p) {
				if end := leaseEnd(t, client, lock, tok); end > 0 {
					midSection++
					in := writerIn(end*1000, 3*ttl+5*time.Second, fmt.Sprintf("a section after the lease of killed reader %d", tok))
					frees = append(frees, freed{time.UnixMilli(end).Sub(killed), time.Duration(in.entered-end*1000) * time.Microsecond})
					last = max(last, end)
				}
			}
			procs[i] = startShared(t, fmt.Sprintf("reader %d.%d", i, n+1), readers)
			all = append(all, procs[i])
			if last == 0 { // killed between sections, or waiting: the writer goes on
				writerIn(time.Now().UnixMicro(), 3*ttl+5*time.Second, "a section after a kill")
			}
			continue
		}
		p.signal(t, syscall.SIGSTOP)
		waitUntil(t, 5*time.Second, p.name+" to stop", func() bool { s := procState(p.cmd.Process.Pid); return s == 'T' || s == 't' })
		stops++
		time.Sleep(time.Duration(1500+rng.IntN(1000)) * time.Millisecond) // the pause, past the lease
		open := openSections(p)
		p.signal(t, syscall.SIGCONT)
		// Each section it was in goes on to its late write, and Do returns.
		for _, tok := range open {
			p.await(t, 0, 10*time.Second, fmt.Sprintf("the end of section %d after the pause", tok), verb("DONE", "r", strconv.FormatInt(tok, 10)))
		}
	}
	faulted := time.Since(begin)

	// The end: one more reader killed in a section, so that a dead holder's field is in the
	// lock when the others stop; nobody touches the lock after that, and it must go by
	// itself, by its key's expiry (at most twice the lease after its last write, see lib.lua).
	var lastKill time.Time
	var lastEnd int64
	for try := 0; lastEnd == 0 && try < 3; try++ {
		p := procs[0]
		p.await(t, len(p.snapshot()), 10*time.Second, "a section", verb("ENTER", "r"))
		p.signal(t, syscall.SIGKILL)
		lastKill = time.Now()
		if !p.exited(10 * time.Second) {
			t.Fatalf("%s did not exit after SIGKILL", p.name)
		}
		for _, tok := range openSections(p) {
			lastEnd = max(lastEnd, leaseEnd(t, client, lock, tok))
		}
		if lastEnd == 0 {
			procs[0] = startShared(t, fmt.Sprintf("reader 0.end%d", try), readers)
			all = append(all, procs[0])
		}
	}
	if lastEnd == 0 {
		t.Fatal("could not kill a reader inside a section")
	}
	rest := append([]*sharedProc{writer}, procs[1:]...)
	for _, p := range rest {
		_ = p.stdin.Close()
	}
	for _, p := range rest {
		if !p.exited(15 * time.Second) {
			t.Fatalf("%s did not stop at the end of its stdin:\n%s", p.name, p.output())
		}
	}
	ended := time.Now()
	// The bound runs from the last kill, or from the last live process's exit when that came
	// later: until it stopped, a live reader could take a section and extend the hash (on a
	// loaded machine the processes take a while to stop).
	from := lastKill
	if ended.After(from) {
		from = ended
	}
	var left time.Duration
	for {
		n, err := client.Exists(ctx, lock).Result()
		if err != nil {
			t.Fatal(err)
		}
		if left = time.Since(lastKill); n == 0 {
			break
		}
		if time.Since(from) > 2*ttl+time.Second {
			t.Fatalf("the lock is still there %v after the last reader was killed (%v after the others exited): %v",
				left.Round(time.Millisecond), time.Since(ended).Round(time.Millisecond), client.HGetAll(ctx, lock).Val())
		}
		time.Sleep(20 * time.Millisecond)
	}
	kills++

	counts, conflicts := check.stats(t, client)
	if counts["conflicts"] != 0 {
		t.Fatalf("%d entries beside a holder of a valid lease of the other kind (seed %d):\n%s", counts["conflicts"], seed, strings.Join(conflicts, "\n"))
	}
	sections, writes, dones := sharedRecords(all)
	var highest int64
	readerSections, writerSections := 0, 0
	for _, sec := range sections {
		highest = max(highest, sec.token)
		if sec.kind == "w" {
			writerSections++
		} else {
			readerSections++
		}
	}
	for key, f := range dones {
		if f[0] != "true" && (len(f) < 2 || f[1] != "<nil>") {
			t.Errorf("section %s: Do: %s", key, strings.Join(f[1:], " "))
		}
	}
	// Tokens follow the order of entry between the kinds, which never overlap.
	for _, w := range sections {
		if w.kind != "w" {
			continue
		}
		for _, r := range sections {
			if r.kind == "r" && r.conflicts >= 0 && (r.entered < w.entered) != (r.token < w.token) {
				t.Errorf("reader %d entered at %d, writer %d at %d: tokens out of the order of entry", r.token, r.entered, w.token, w.entered)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The store: no write accepted after an accepted write with a higher token; every
	// writer's write accepted; the late writes of stopped readers after a writer's refused.
	until := map[int64]int64{}
	writerTokens := map[string]bool{}
	for _, sec := range sections {
		until[sec.token] = sec.until
	}
	for _, w := range writes {
		if w.kind == "w" {
			writerTokens[strconv.FormatInt(w.token, 10)] = true
		}
	}
	lateAfterWriter, late, byReaders, readerWrites := 0, 0, 0, 0
	for _, a := range writes {
		if a.outcome == "error" {
			t.Errorf("%s: the write of %d failed", a.proc, a.token)
			continue
		}
		if a.kind == "w" && a.outcome != "ok" {
			t.Errorf("the writer's write with token %d was refused (mark %s)", a.token, a.mark)
		}
		var after *sharedWrite // an accepted write with a higher token, done before a was sent
		for j, b := range writes {
			if b.outcome == "ok" && b.token > a.token && b.done < a.sent {
				after = &writes[j]
				break
			}
		}
		if after != nil && a.outcome == "ok" {
			t.Errorf("%s's write with token %d accepted after the write of %d by %s: a stale write", a.proc, a.token, after.token, after.proc)
		}
		if a.kind != "r" {
			continue
		}
		readerWrites++
		if a.outcome == "stale" && !writerTokens[a.mark] {
			byReaders++
		}
		if a.sent <= until[a.token] {
			continue
		}
		late++
		writerBefore := slices.ContainsFunc(writes, func(b sharedWrite) bool {
			return b.kind == "w" && b.outcome == "ok" && b.token > a.token && b.done < a.sent
		})
		if !writerBefore {
			continue
		}
		lateAfterWriter++
		if a.outcome != "stale" {
			t.Errorf("%s: the late write of token %d, after a writer's, was %s", a.proc, a.token, a.outcome)
		}
		if d := dones["r:"+strconv.FormatInt(a.token, 10)]; len(d) == 0 || d[0] != "true" {
			t.Errorf("%s: Do of section %d, stopped past its lease: got %v, want ErrNotHeld", a.proc, a.token, d)
		}
	}
	if lateAfterWriter == 0 {
		t.Errorf("no stopped reader wrote after a writer had written (seed %d): the scenario under test did not happen", seed)
	}

	// A killed reader's place frees when its lease ends.
	if len(frees) == 0 {
		t.Errorf("no reader was killed inside a section (seed %d)", seed)
	}
	var worstIn time.Duration
	var leaseLeft []string
	for _, f := range frees {
		worstIn = max(worstIn, f.writerIn)
		leaseLeft = append(leaseLeft, ms(f.afterKill)+"/"+ms(f.writerIn))
		if f.writerIn < 0 || f.writerIn > time.Second {
			t.Errorf("the writer entered %v after the end of a killed reader's lease, want 0 to 1s", f.writerIn)
		}
	}

	// The resource is free, and the next token is above every one issued.
	x, err := newLocker(t, client).TryAcquire(ctx, "res")
	if err != nil {
		t.Fatalf("the resource after the last process: %v", err)
	}
	if x.Token() <= highest {
		t.Errorf("token %d after the run, want above %d", x.Token(), highest)
	}
	_ = x.Release(ctx)

	figure(t, "shared-faults", "3 reader processes (2 goroutines, 40–80ms sections, lease %v) and 1 writer, %v with %d SIGKILLs and %d SIGSTOPs of 1.5–2.5s: %d reader sections (%d entered after their lease), %d writer sections; entries beside a valid lease of the other kind: 0; store: %d writer writes all accepted, %d reader writes (%d refused for a concurrent reader's), %d late, %d of them after a writer's write: all refused (ErrStaleToken, Do ErrNotHeld); a reader killed in a section at the end: lease ended %v later, the others stopped %v later, the lock key gone by itself %v after the kill",
		ttl, faulted.Round(time.Millisecond), kills, stops, readerSections, counts["late"], writerSections, len(writes)-readerWrites, readerWrites, byReaders, late, lateAfterWriter,
		time.UnixMilli(lastEnd).Sub(lastKill).Round(time.Millisecond), ended.Sub(lastKill).Round(time.Millisecond), left.Round(time.Millisecond))
	figure(t, "shared-killed-reader", "%d readers killed in a section: lease end after the kill / writer in after the lease end (by the server's clock): %s; worst %v",
		midSection, strings.Join(leaseLeft, ", "), worstIn.Round(time.Millisecond))
}
