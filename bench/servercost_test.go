package bench_test

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
)

// BenchmarkServerCost counts the instructions the Redis server itself executes per
// operation, for fencekit's calls and the peers' in one run: it starts a redis-server of
// its own under valgrind --tool=callgrind (the one on PATH, or FENCING_REDIS_SERVER), and
// for each row warms up (100 operations), zeroes the server's counters, runs b.N operations
// on 100 resources in turn, dumps the counters and reports server-Ir/op: the instructions of
// the dump less the server's own timer (serverCron, inclusive: about 1.2M instructions a
// second whatever the load, so its share depends on wall time) and the expiry cycles that
// beforeSleep runs (deleting expired keys such as release records). Unlike time, the count
// does not move with the machine's load (±1% between server starts, as Redis seeds its
// hashes at random). Run it with -benchtime 1000x; see docs/benchmarks.md ("Server cost").
//
// The rows: two PINGs (the floor of a round trip), redsync's Lock + Unlock, bsm/redislock's
// Obtain + Release, the smallest correct fenced lock in Lua (INCR and SET NX PX; GET and
// DEL), then fencekit's TryAcquire + Release exclusive, Shared, WithLimit(4), Shared beside
// 7 readers that hold the resource, and a hand-off cycle on one resource: A holds, B's
// Acquire queues, A's release grants B, B releases.
func BenchmarkServerCost(b *testing.B) {
	if _, err := exec.LookPath("valgrind"); err != nil {
		b.Skip("valgrind is not installed")
	}
	if _, err := exec.LookPath("callgrind_annotate"); err != nil {
		b.Skip("callgrind_annotate is not installed")
	}
	dir := *costDir
	if dir == "" {
		dir = b.TempDir()
	}
	vgdb := filepath.Join(dir, "vgdb")
	srv := redisproc.Start(b,
		redisproc.Under("valgrind", "--tool=callgrind", "--vgdb-prefix="+vgdb,
			"--callgrind-out-file="+filepath.Join(dir, "callgrind.out.%p")),
		redisproc.Timeout(2*time.Minute))
	newClient := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), DisableIdentity: true, MaintNotificationsConfig: noMaint, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	ctx := context.Background()
	for _, row := range serverCostRows(b, newClient) {
		b.Run(row.name, func(b *testing.B) {
			if row.setup != nil {
				row.setup(b)
			}
			for i := range 100 {
				if err := row.run(ctx, i); err != nil {
					b.Fatalf("warm-up: %v", err)
				}
			}
			pid := strconv.Itoa(srv.PID())
			callgrindControl(b, vgdb, "-z", pid)
			b.ResetTimer()
			for i := range b.N {
				if err := row.run(ctx, i%100); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			ir := serverInstructions(b, dir, vgdb, pid)
			b.ReportMetric(float64(ir)/float64(b.N), "server-Ir/op")
			if row.teardown != nil {
				row.teardown(b)
			}
		})
	}
}

// costDir keeps BenchmarkServerCost's callgrind dumps, one per row, for callgrind_annotate.
var costDir = flag.String("costdir", "", "BenchmarkServerCost: keep the callgrind dumps in this directory (default: a temporary one)")

// A costRow is one row of BenchmarkServerCost: run is one operation on the i-th of 100
// resources.
type costRow struct {
	name     string
	setup    func(b *testing.B)
	run      func(ctx context.Context, i int) error
	teardown func(b *testing.B)
}

// serverCostRows returns the rows, each on clients of its own from newClient.
func serverCostRows(b *testing.B, newClient func() *redis.Client) []costRow {
	resource := func(i int) string { return "u" + strconv.Itoa(i) }
	// The peers' keys are as long as fencekit's lock keys with its default prefix.
	key := func(i int) string { return fencing.DefaultPrefix + "{" + resource(i) + "}:lock" }
	locker := func(opts ...fencing.Option) *fencing.Locker {
		l := fencing.New(newClient(), opts...)
		b.Cleanup(func() { _ = l.Close() })
		return l
	}
	pair := func(l *fencing.Locker, opts ...fencing.CallOption) func(ctx context.Context, i int) error {
		return func(ctx context.Context, i int) error {
			lock, err := l.TryAcquire(ctx, resource(i), opts...)
			if err != nil {
				return err
			}
			return lock.Release(ctx)
		}
	}
	pings := newClient()
	rs := redsync.New(goredis.NewPool(newClient()))
	rl := redislock.New(newClient())
	lua := newClient()
	acquire := redis.NewScript(`local t = redis.call('INCR', KEYS[2])
if redis.call('SET', KEYS[1], ARGV[1] .. ':' .. t, 'NX', 'PX', ARGV[2]) then return t end
return 0`)
	release := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
	var owner atomic.Int64
	exclusive, shared, limited := locker(), locker(), locker()
	expiring, sharedExpiring := locker(fencing.WithCounterExpiry(time.Hour)), locker(fencing.WithCounterExpiry(time.Hour))
	labeled, sharedLabeled := locker(), locker()
	label := fencing.WithLabel("asynq:6f1c2d0e-8b4a-4c3e-9f2a-1b2c3d4e5f60")
	readers, beside := locker(), locker()
	var held []*fencing.Lock
	a := locker()
	watch := &scriptWatch{done: make(chan struct{}, 1)}
	bc := newClient()
	bc.AddHook(watch)
	bl := fencing.New(bc)
	b.Cleanup(func() { _ = bl.Close() })
	return []costRow{
		{name: "pings", run: func(ctx context.Context, _ int) error {
			if err := pings.Ping(ctx).Err(); err != nil {
				return err
			}
			return pings.Ping(ctx).Err()
		}},
		{name: "redsync", run: func(ctx context.Context, i int) error {
			m := rs.NewMutex(key(i), redsync.WithExpiry(leaseTTL), redsync.WithTries(1))
			if err := m.LockContext(ctx); err != nil {
				return err
			}
			_, err := m.UnlockContext(ctx)
			return err
		}},
		{name: "redislock", run: func(ctx context.Context, i int) error {
			lock, err := rl.Obtain(ctx, key(i), leaseTTL, nil)
			if err != nil {
				return err
			}
			return lock.Release(ctx)
		}},
		{name: "fenced-lua", run: func(ctx context.Context, i int) error {
			k := key(i)
			fence := strings.TrimSuffix(k, "lock") + "fence"
			v := strconv.FormatInt(owner.Add(1), 10)
			t, err := acquire.Run(ctx, lua, []string{k, fence}, v, leaseTTL.Milliseconds()).Int64()
			if err != nil || t == 0 {
				return fmt.Errorf("fenced-lua acquire: %d, %v", t, err)
			}
			return release.Run(ctx, lua, []string{k}, v+":"+strconv.FormatInt(t, 10)).Err()
		}},
		{name: "fencekit", run: pair(exclusive)},
		{name: "fencekit-shared", run: pair(shared, fencing.Shared())},
		{name: "fencekit-limit4", run: pair(limited, fencing.WithLimit(4))},
		{name: "fencekit-expiry", run: pair(expiring)},
		{name: "fencekit-shared-expiry", run: pair(sharedExpiring, fencing.Shared())},
		{name: "fencekit-label", run: pair(labeled, label)},
		{name: "fencekit-shared-label", run: pair(sharedLabeled, fencing.Shared(), label)},
		{
			name: "fencekit-shared-beside-7",
			setup: func(b *testing.B) {
				held = held[:0]
				for i := range 100 {
					for range 7 {
						lock, err := readers.TryAcquire(context.Background(), resource(i), fencing.Shared(), fencing.WithTTL(time.Hour))
						if err != nil {
							b.Fatal(err)
						}
						held = append(held, lock)
					}
				}
			},
			run: pair(beside, fencing.Shared()),
			teardown: func(b *testing.B) {
				for _, k := range held {
					if err := k.Release(context.Background()); err != nil {
						b.Error(err)
					}
				}
			},
		},
		{name: "fencekit-handoff", run: handoff(a, bl, watch)},
	}
}

// handoff returns one hand-off cycle on the resource "hot": a takes it, b's Acquire queues
// behind a (known from b's client, which reports the reply of each script it sends; in the
// steady state b's Locker listens on the resource, and its one script is the join), a's
// release grants it to b, and b releases.
func handoff(a, b *fencing.Locker, watch *scriptWatch) func(ctx context.Context, i int) error {
	return func(ctx context.Context, _ int) error {
		held, err := a.TryAcquire(ctx, "hot")
		if err != nil {
			return err
		}
		for len(watch.done) > 0 {
			<-watch.done
		}
		watch.on.Store(true)
		got := make(chan error, 1)
		go func() {
			lock, err := b.Acquire(ctx, "hot")
			if err == nil {
				err = lock.Release(ctx)
			}
			got <- err
		}()
		select {
		case <-watch.done:
		case err := <-got:
			return fmt.Errorf("b's Acquire returned before it queued: %v", err)
		}
		watch.on.Store(false)
		if err := held.Release(ctx); err != nil {
			return err
		}
		return <-got
	}
}

// scriptWatch is a go-redis hook that reports, while on, the reply of each script its client
// sends.
type scriptWatch struct {
	done chan struct{}
	on   atomic.Bool
}

func (w *scriptWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := cmd.Name(); w.on.Load() && (name == "evalsha" || name == "eval") {
			select {
			case w.done <- struct{}{}:
			default:
			}
		}
		return err
	}
}

func (w *scriptWatch) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *scriptWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// callgrindControl runs callgrind_control on the server behind the vgdb prefix vgdb.
func callgrindControl(b *testing.B, vgdb string, args ...string) {
	b.Helper()
	args = append([]string{"--vgdb-prefix=" + vgdb}, args...)
	if out, err := exec.Command("callgrind_control", args...).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control %v: %v\n%s", args, err, out)
	}
}

// serverInstructions dumps the counters of the server pid and returns the instructions it
// executed since they were zeroed, less its timer and the expiry cycles beforeSleep runs.
func serverInstructions(b *testing.B, dir, vgdb, pid string) int64 {
	b.Helper()
	glob := filepath.Join(dir, "callgrind.out."+pid+".*")
	before := dumps(b, glob)
	callgrindControl(b, vgdb, "-d", pid)
	total := instructions(b, glob, before)
	var dump string
	for _, f := range dumps(b, glob) {
		if !contains(before, f) {
			dump = f
		}
	}
	inclusive := annotate(b, dump, "--inclusive=yes")
	callers := annotate(b, dump, "--inclusive=yes", "--tree=caller")
	return total - cost(inclusive, "serverCron") - expiryOutsideCron(callers)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// annotate returns callgrind_annotate's output for dump.
func annotate(b *testing.B, dump string, args ...string) string {
	b.Helper()
	out, err := exec.Command("callgrind_annotate", append(args, dump)...).Output()
	if err != nil {
		b.Fatalf("callgrind_annotate %v %s: %v", args, dump, err)
	}
	return string(out)
}

// cost returns the inclusive cost of function fn in callgrind_annotate's output, 0 when it
// is not there.
func cost(out, fn string) int64 {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "???:"+fn+" ") || strings.HasSuffix(line, ":"+fn) {
			if n, ok := leadingCount(line); ok {
				return n
			}
		}
	}
	return 0
}

// expiryOutsideCron returns the inclusive cost of activeExpireCycle called from anywhere
// but serverCron's databasesCron, from callgrind_annotate's caller tree: the lines "n < fn"
// above the line "n * activeExpireCycle".
func expiryOutsideCron(out string) int64 {
	lines := strings.Split(out, "\n")
	for i, line := range lines {
		if !strings.Contains(line, "*  ???:activeExpireCycle ") {
			continue
		}
		var sum int64
		for j := i - 1; j >= 0 && strings.Contains(lines[j], "<"); j-- {
			if strings.Contains(lines[j], "databasesCron") {
				continue
			}
			if n, ok := leadingCount(lines[j]); ok {
				sum += n
			}
		}
		return sum
	}
	return 0
}

// leadingCount reads the count that starts a line of callgrind_annotate, "1,234,567 (...".
func leadingCount(line string) (int64, bool) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(bytes.ReplaceAll([]byte(f[0]), []byte(","), nil)), 10, 64)
	return n, err == nil
}
