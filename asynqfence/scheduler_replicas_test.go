//go:build unix

package asynqfence_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

const envChildScheduler = "FENCEKIT_CHILD_SCHEDULER"

// replicaLease is the replicas' lease: short, to keep the test short.
const replicaLease = 2 * time.Second

// TestSchedulerReplicas runs three replicas (this test binary run again, three processes) of
// one Scheduler with an "@every 1s" entry, on a real Redis, for about 30 s. The leader is
// killed with SIGKILL twice (a new replica is started in its place each time) and stopped
// with SIGSTOP once, for twice its lease, then continued. The replicas report to a Redis list
// when they win leadership, every renewal and every enqueue with their lease's local end
// ([fencing.ValidUntilFromContext]), and when a term ends. Then:
//   - every tick in the queue is there once, by its task ID, and every tick that a replica
//     reports as enqueued (not a duplicate) is reported once: no tick was enqueued twice; a
//     tick that no replica reported came just before a replica was killed or stopped (its
//     report lost), at most one per signal;
//   - the ticks have no holes except at the three failovers, and the largest gap between
//     two ticks is at most the lease plus one period;
//   - no two terms overlap: a term lasts, as its process believes, from the win until the
//     latest lease end it reported (or the end it noticed), and the next term begins after it;
//   - epochs increase from term to term, and every enqueue began inside its term's lease.
func TestSchedulerReplicas(t *testing.T) {
	t.Parallel()
	if os.Getenv(envChildScheduler) != "" {
		childScheduler()
		return
	}
	if !redistest.Real() {
		t.Skip("needs a real Redis, whose leases expire: set " + redistest.EnvAddr)
	}
	h := newHarness(t)
	r := h.r
	reports := r.Prefix + "reports"
	type replica struct {
		cmd *exec.Cmd
		out *bytes.Buffer
	}
	var (
		mu       sync.Mutex
		replicas = map[int]*replica{}
	)
	start := func() {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestSchedulerReplicas$")
		cmd.Env = append(os.Environ(), envChildScheduler+"="+strings.Join([]string{r.Addr, strconv.Itoa(r.DB), r.Prefix, h.queue, reports}, ","))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		replicas[cmd.Process.Pid] = &replica{cmd, &out}
		mu.Unlock()
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, rp := range replicas {
			_ = rp.cmd.Process.Signal(syscall.SIGCONT)
			_ = rp.cmd.Process.Kill()
			_ = rp.cmd.Wait()
			if t.Failed() {
				t.Logf("replica %d:\n%s", rp.cmd.Process.Pid, rp.out.String())
			}
		}
	}()
	kill := func(pid int) {
		mu.Lock()
		rp := replicas[pid]
		delete(replicas, pid)
		mu.Unlock()
		if rp == nil {
			t.Fatalf("no replica %d", pid)
		}
		_ = rp.cmd.Process.Kill()
		_ = rp.cmd.Wait()
	}
	read := func() *replicaLog {
		lines, err := r.Client.LRange(context.Background(), reports, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		lg, err := parseReplicaLog(lines)
		if err != nil {
			t.Fatal(err)
		}
		return lg
	}
	// leader waits for a term with an epoch above after, and returns it.
	leader := func(after int64) *replicaTerm {
		t.Helper()
		var term *replicaTerm
		waitFor(t, fmt.Sprintf("a leader with an epoch above %d", after), func() bool {
			terms := read().terms
			if len(terms) > 0 && terms[len(terms)-1].token > after {
				term = terms[len(terms)-1]
				return true
			}
			return false
		})
		return term
	}
	began := time.Now()
	for range 3 {
		start()
	}
	var events []string
	var signalled []time.Time // when replicas were gone or stopped: a last report may be lost
	lead := leader(0)
	time.Sleep(5 * time.Second)
	for range 2 {
		events = append(events, fmt.Sprintf("%v SIGKILL %d (epoch %d)", time.Since(began).Round(time.Millisecond), lead.pid, lead.token))
		kill(lead.pid)
		signalled = append(signalled, time.Now())
		start()
		lead = leader(lead.token)
		time.Sleep(5 * time.Second)
	}
	events = append(events, fmt.Sprintf("%v SIGSTOP %d (epoch %d)", time.Since(began).Round(time.Millisecond), lead.pid, lead.token))
	mu.Lock()
	stopped := replicas[lead.pid].cmd.Process
	mu.Unlock()
	if err := stopped.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	signalled = append(signalled, time.Now())
	time.Sleep(2 * replicaLease)
	if err := stopped.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	events = append(events, fmt.Sprintf("%v SIGCONT %d", time.Since(began).Round(time.Millisecond), lead.pid))
	lead = leader(lead.token)
	time.Sleep(30*time.Second - time.Since(began))
	mu.Lock()
	for pid := range replicas {
		mu.Unlock()
		kill(pid)
		mu.Lock()
	}
	mu.Unlock()
	signalled = append(signalled, time.Now())
	for _, e := range events {
		t.Log(e)
	}

	lg := read()
	// The queue: one task per tick, by task ID.
	keys, err := r.Client.Keys(context.Background(), "asynq:{"+h.queue+"}:t:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var ticks []int64
	for _, k := range keys {
		id := strings.TrimPrefix(k, "asynq:{"+h.queue+"}:t:")
		i := strings.LastIndexByte(id, ':')
		sec, err := strconv.ParseInt(id[i+1:], 10, 64)
		if err != nil || !strings.HasPrefix(id, "asynqfence:sched:") {
			t.Fatalf("unexpected task %q in the queue", id)
		}
		ticks = append(ticks, sec)
	}
	slices.Sort(ticks)
	if len(ticks) < 15 {
		t.Fatalf("got %d ticks in the queue, want about 25", len(ticks))
	}
	if n := r.Client.LLen(context.Background(), "asynq:{"+h.queue+"}:pending").Val(); n != int64(len(ticks)) {
		t.Errorf("got %d pending tasks, want one per tick: %d", n, len(ticks))
	}
	// Every enqueue a replica reported: each tick enqueued (not a duplicate) once, and in the queue.
	enqueued := map[int64]int{}
	dups := 0
	for _, e := range lg.enqueues {
		switch {
		case e.err != "":
			t.Errorf("replica %d: enqueue of tick %d failed: %s", e.pid, e.tick, e.err)
		case e.dup:
			dups++
		default:
			enqueued[e.tick]++
		}
	}
	for tick, n := range enqueued {
		if n != 1 {
			t.Errorf("tick %d enqueued %d times", tick, n)
		}
		if _, ok := slices.BinarySearch(ticks, tick); !ok {
			t.Errorf("tick %d reported enqueued, not in the queue", tick)
		}
	}
	// A tick in the queue that no replica reported: its replica was killed (or stopped past its
	// report's timeout) between the enqueue and the report, so the tick came at most a lease and
	// a period before a signal.
	var unreported []int64
	for _, tick := range ticks {
		if enqueued[tick] > 0 {
			continue
		}
		unreported = append(unreported, tick)
		at := time.Unix(tick, 0)
		if !slices.ContainsFunc(signalled, func(s time.Time) bool {
			return !s.Before(at) && s.Sub(at) <= replicaLease+time.Second
		}) {
			t.Errorf("tick %d (%v) is in the queue, reported by no replica, and no replica was signalled just after it",
				tick, at.Sub(began).Round(time.Millisecond))
		}
	}
	if len(unreported) > len(signalled) {
		t.Errorf("got %d ticks in the queue that no replica reported, want at most one per signal (%d)", len(unreported), len(signalled))
	}
	// Holes only at the failovers, none longer than the lease plus a period.
	var gaps []string
	var largest int64
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i] - ticks[i-1]; d > 1 {
			gaps = append(gaps, fmt.Sprintf("%ds after %s", d, time.Unix(ticks[i-1], 0).Sub(began).Round(time.Millisecond)))
			largest = max(largest, d)
		}
	}
	// A loaded machine may delay a takeover past the dead leader's lease: the hole may be longer
	// by that, as the terms show it, not by more.
	var late time.Duration
	for i := 1; i < len(lg.terms); i++ {
		late = max(late, lg.terms[i].won.Sub(lg.terms[i-1].believed()))
	}
	if time.Duration(largest)*time.Second > replicaLease+time.Second+late {
		t.Errorf("largest gap between ticks %ds, want at most the lease %v plus a period (and the latest takeover's %v past a lease)", largest, replicaLease, late)
	}
	if len(gaps) > 3 {
		t.Errorf("got %d holes in the ticks, want at most one per failover (3): %v", len(gaps), gaps)
	}
	// Terms: increasing epochs, no overlap, every enqueue inside its term's lease.
	terms := lg.terms
	if len(terms) < 4 {
		t.Fatalf("got %d terms, want at least 4 (three failovers)", len(terms))
	}
	for i, tm := range terms {
		if i > 0 {
			prev := terms[i-1]
			if tm.token <= prev.token {
				t.Errorf("term of epoch %d (pid %d) follows epoch %d", tm.token, tm.pid, prev.token)
			}
			if tm.won.Before(prev.believed()) {
				t.Errorf("replica %d led (epoch %d) from %v while replica %d (epoch %d) believed it led until %v",
					tm.pid, tm.token, tm.won.Sub(began), prev.pid, prev.token, prev.believed().Sub(began))
			}
			t.Logf("term %d: replica %d led %v after replica %d's belief ended", tm.token, tm.pid, tm.won.Sub(prev.believed()).Round(time.Millisecond), prev.pid)
		}
	}
	for _, e := range lg.enqueues {
		tm := lg.term(e.token)
		if tm == nil || e.pid != tm.pid || e.began.Before(tm.won) || !e.began.Before(e.until) {
			t.Errorf("enqueue of tick %d by replica %d (epoch %d) began at %v, outside its term %+v", e.tick, e.pid, e.token, e.began.Sub(began), tm)
		}
	}
	t.Logf("FIGURE scheduler replicas: %d ticks in %v, each enqueued once (%d duplicates refused by task ID, %d unreported by a signalled replica), %d terms, holes %v, largest gap %ds (lease %v + period 1s)",
		len(ticks), time.Unix(ticks[len(ticks)-1], 0).Sub(time.Unix(ticks[0], 0)), dups, len(unreported), len(terms), gaps, largest, replicaLease)
}

// replicaLog is what the replicas reported.
type replicaLog struct {
	terms    []*replicaTerm // by epoch
	enqueues []replicaEnqueue
}

type replicaTerm struct {
	pid   int
	token int64
	won   time.Time
	until time.Time // the latest lease end reported; zero when none
	ended time.Time // when the replica saw the term end; zero when it did not report it
}

// believed returns when the term's process stopped believing that it led.
func (tm *replicaTerm) believed() time.Time {
	end := tm.until
	if end.IsZero() {
		end = tm.won.Add(replicaLease) // no report: the lease, from the win
	}
	if !tm.ended.IsZero() && tm.ended.Before(end) {
		end = tm.ended
	}
	return end
}

type replicaEnqueue struct {
	pid   int
	token int64
	tick  int64
	dup   bool
	err   string
	began time.Time
	until time.Time
}

func (lg *replicaLog) term(token int64) *replicaTerm {
	i := sort.Search(len(lg.terms), func(i int) bool { return lg.terms[i].token >= token })
	if i < len(lg.terms) && lg.terms[i].token == token {
		return lg.terms[i]
	}
	return nil
}

// parseReplicaLog reads the reports: "won <pid> <epoch> <ns>", "valid <pid> <epoch> <until
// ns>", "end <pid> <epoch> <ns>" and "enq <pid> <epoch> <tick s> <dup> <began ns> <until ns>
// <err>".
func parseReplicaLog(lines []string) (*replicaLog, error) {
	lg := &replicaLog{}
	byToken := map[int64]*replicaTerm{}
	termOf := func(token int64, pid int) *replicaTerm {
		tm := byToken[token]
		if tm == nil {
			tm = &replicaTerm{pid: pid, token: token}
			byToken[token] = tm
		}
		return tm
	}
	ns := func(s string) time.Time {
		n, _ := strconv.ParseInt(s, 10, 64)
		return time.Unix(0, n)
	}
	for _, line := range lines {
		f := strings.SplitN(line, " ", 9)
		if len(f) < 4 {
			return nil, fmt.Errorf("bad report %q", line)
		}
		pid, _ := strconv.Atoi(f[1])
		token, _ := strconv.ParseInt(f[2], 10, 64)
		tm := termOf(token, pid)
		switch f[0] {
		case "won":
			tm.won = ns(f[3])
		case "valid":
			if u := ns(f[3]); u.After(tm.until) {
				tm.until = u
			}
		case "end":
			tm.ended = ns(f[3])
		case "enq":
			if len(f) < 8 {
				return nil, fmt.Errorf("bad report %q", line)
			}
			tick, _ := strconv.ParseInt(f[3], 10, 64)
			e := replicaEnqueue{pid: pid, token: token, tick: tick, dup: f[4] == "1", began: ns(f[5]), until: ns(f[6])}
			if len(f) == 8 && f[7] != "ok" {
				e.err = f[7]
			} else if len(f) == 9 {
				e.err = f[7] + " " + f[8]
			}
			if e.until.After(tm.until) {
				tm.until = e.until
			}
			lg.enqueues = append(lg.enqueues, e)
		default:
			return nil, fmt.Errorf("bad report %q", line)
		}
	}
	for _, tm := range byToken {
		if !tm.won.IsZero() {
			lg.terms = append(lg.terms, tm)
		}
	}
	sort.Slice(lg.terms, func(i, j int) bool { return lg.terms[i].token < lg.terms[j].token })
	return lg, nil
}

// childScheduler is a replica of TestSchedulerReplicas: it runs the Scheduler and reports to
// the list until it is killed.
func childScheduler() {
	parts := strings.Split(os.Getenv(envChildScheduler), ",")
	if len(parts) != 5 {
		os.Exit(2)
	}
	db, _ := strconv.Atoi(parts[1])
	prefix, queue, reports := parts[2], parts[3], parts[4]
	rdb := redis.NewClient(&redis.Options{Addr: parts[0], DB: db, DisableIdentity: true})
	pid := os.Getpid()
	report := func(format string, args ...any) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		rdb.RPush(ctx, reports, fmt.Sprintf(format, args...))
	}
	hooks := observe.Hooks{End: func(ctx context.Context, e observe.Event) {
		switch {
		case e.Op == observe.OpCampaign && e.Outcome == observe.OutcomeAcquired:
			report("won %d %d %d", pid, e.Token, time.Now().UnixNano())
		case e.Op == observe.OpRenew && e.Outcome == observe.OutcomeOK:
			if until, ok := fencing.ValidUntilFromContext(ctx); ok {
				report("valid %d %d %d", pid, e.Token, until.UnixNano())
			}
		case e.Op == observe.OpLead:
			report("end %d %d %d", pid, e.Token, time.Now().UnixNano())
		}
	}}
	enq := asynqfence.SchedulerHooks{End: func(ctx context.Context, e asynqfence.EnqueueEvent) {
		token, _ := fencing.TokenFromContext(ctx)
		until, _ := fencing.ValidUntilFromContext(ctx)
		dup, msg := 0, "ok"
		if e.Duplicate {
			dup = 1
		}
		if e.Err != nil {
			msg = strings.ReplaceAll(e.Err.Error(), "\n", " ")
		}
		report("enq %d %d %d %d %d %d %s", pid, token, e.Tick.Unix(), dup, time.Now().Add(-e.Elapsed).UnixNano(), until.UnixNano(), msg)
	}}
	l := fencing.New(rdb, fencing.WithPrefix(prefix), fencing.WithTTL(replicaLease))
	s := asynqfence.NewScheduler(asynq.NewClientFromRedisClient(rdb), l, "sched",
		asynqfence.WithLeaderOptions(fencing.WithHooks(hooks)), asynqfence.WithSchedulerHooks(enq))
	if _, err := s.Register("@every 1s", asynq.NewTask("tick", nil), asynq.Queue(queue)); err != nil {
		fmt.Println("register:", err)
		os.Exit(2)
	}
	fmt.Println("run:", s.Run(context.Background()))
	os.Exit(1)
}
