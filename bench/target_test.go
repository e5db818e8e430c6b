package bench_test

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/fencekit/fencekit/internal/testkit/redisproc"
)

const (
	// envAddr names the environment variable that points the standalone rows at a Redis.
	envAddr = "FENCING_REDIS_ADDR"
	// standaloneDB is the database the standalone rows use, away from DB 0, as the
	// repository's tests do.
	standaloneDB = 9
)

// A dialFunc opens a connection for a client, as redis.Options.Dialer does.
type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// A target is the Redis that one family of rows runs against: one server, or the primaries
// of a cluster.
type target struct {
	// newClient returns a new client for one process; the caller closes it. A dial that is
	// not nil opens every connection of the client, its pub/sub ones included.
	newClient func(dial dialFunc) redis.UniversalClient
	// primaries holds a plain client to every primary, for INFO and the cleanup.
	primaries []*redis.Client
	// prefix starts every key the family creates; it contains no '{' or '}'.
	prefix string
	// callgrind, when not empty, is the directory where the primaries, run under valgrind
	// --tool=callgrind (-callgrind), write their dumps; instructions then holds the
	// instructions each has executed since the target started, as far as stats has read.
	callgrind    string
	instructions []int64
}

// underCallgrind runs the servers of the cluster rows under callgrind.
var underCallgrind = flag.Bool("callgrind", false,
	"run the servers of the cluster rows under valgrind --tool=callgrind and report the instructions "+
		"they execute per section (server-Ir/section); they run about 50 times slower, so lower -pacedrate")

// noMaint turns off go-redis's maintenance notifications, which would add a command to
// every new connection; CLIENT SETINFO is turned off with DisableIdentity for the same reason.
var noMaint = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}

// standalone returns the server named by FENCING_REDIS_ADDR, or skips b when it is unset.
func standalone(b *testing.B) *target {
	b.Helper()
	addr := os.Getenv(envAddr)
	if addr == "" {
		b.Skip(envAddr + " is not set: start a private redis-server and point it there (see README.md); " +
			"the rows read server-wide INFO stats, so the server must be otherwise idle")
	}
	options := func(dial dialFunc) *redis.Options {
		return &redis.Options{Addr: addr, DB: standaloneDB, Dialer: dial, DisableIdentity: true, MaintNotificationsConfig: noMaint}
	}
	admin := redis.NewClient(options(nil))
	b.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.Ping(ctx).Err(); err != nil {
		b.Fatalf("ping %s: %v", addr, err)
	}
	t := &target{
		newClient: func(dial dialFunc) redis.UniversalClient { return redis.NewClient(options(dial)) },
		primaries: []*redis.Client{admin},
		prefix:    newPrefix(),
	}
	b.Cleanup(func() { t.deleteKeys(b) })
	return t
}

// cluster starts a local Redis Cluster of three primaries for b, or skips b when
// redis-server is not on PATH.
func cluster(b *testing.B) *target {
	b.Helper()
	return clusterOf(b, 3)
}

// clusterOf starts a local Redis Cluster of n primaries, without replicas, for b, each
// primary serving an equal range of slots (with n = 1, all of them), or skips b when
// redis-server is not on PATH. The servers are stopped when b ends.
func clusterOf(b *testing.B, n int) *target {
	b.Helper()
	if !redisproc.Available() {
		b.Skip("redis-server is not on PATH: the cluster rows start a local cluster with it")
	}
	var opts []redisproc.Option
	dir := ""
	if *underCallgrind {
		if _, err := exec.LookPath("valgrind"); err != nil {
			b.Fatalf("-callgrind: %v", err)
		}
		dir = b.TempDir()
		opts = append(opts,
			redisproc.Under("valgrind", "--tool=callgrind", "--callgrind-out-file="+filepath.Join(dir, "callgrind.out.%p")),
			// A node under callgrind answers the cluster bus late; it must not be taken
			// for failed.
			redisproc.Args("--cluster-node-timeout", "60000"),
			redisproc.Timeout(2*time.Minute))
	}
	cl := redisproc.StartCluster(b, n, opts...)
	t := &target{
		callgrind:    dir,
		instructions: make([]int64, n),
		newClient: func(dial dialFunc) redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: dial, DisableIdentity: true, MaintNotificationsConfig: noMaint})
		},
		prefix: newPrefix(),
	}
	for _, node := range cl.Nodes() {
		t.primaries = append(t.primaries, node.Client(b))
	}
	// The servers die with b anyway; deleting the keys keeps the cleanup honest and
	// checks that it works on a cluster.
	b.Cleanup(func() { t.deleteKeys(b) })
	return t
}

// newPrefix returns a key prefix unique to this run.
func newPrefix() string {
	return fmt.Sprintf("fkbench:%d-%d:", os.Getpid(), time.Now().UnixNano())
}

// adminCommands are the commands the benchmark itself sends to the servers while a row
// runs, to read INFO and to sample CLIENT LIST, as INFO commandstats names them. Their calls
// and their time are taken out of a row's figures.
var adminCommands = []string{"info", "client|list"}

// serverStats is what one primary reports, in INFO, about the work it has done since it
// started.
type serverStats struct {
	// commands is total_commands_processed: every command, those run by scripts included.
	commands int64
	// cpu is used_cpu_sys + used_cpu_user: the CPU time of the whole server process; sys
	// is used_cpu_sys, its part in the kernel (system calls: epoll_wait, reads, writes).
	cpu, sys time.Duration
	// adminCalls and adminTime are the calls of adminCommands and the time the server spent
	// executing them (commandstats calls and usec).
	adminCalls int64
	adminTime  time.Duration
	// instructions is how many instructions the server has executed, when it runs under
	// callgrind (target.callgrind); 0 otherwise.
	instructions int64
	// pid is the server's process id, as INFO server gives it.
	pid string
	// at is when a reading was taken (under callgrind, when the server dumped); span is how
	// long a difference of two readings lasted.
	at   time.Time
	span time.Duration
	// wakeups and preemptions are the voluntary and involuntary context switches of the
	// server's main thread, which runs its event loop: a wakeup ends a wait in epoll_wait, a
	// preemption is the kernel giving the CPU to another process. Read from
	// /proc/<process_id>/status, they are 0 when that cannot be read (not Linux).
	wakeups, preemptions int64
}

// sub returns the work done between an earlier reading and s.
func (s serverStats) sub(earlier serverStats) serverStats {
	return serverStats{
		commands:     s.commands - earlier.commands,
		instructions: s.instructions - earlier.instructions,
		span:         s.at.Sub(earlier.at),
		cpu:          s.cpu - earlier.cpu,
		sys:          s.sys - earlier.sys,
		adminCalls:   s.adminCalls - earlier.adminCalls,
		adminTime:    s.adminTime - earlier.adminTime,
		wakeups:      s.wakeups - earlier.wakeups,
		preemptions:  s.preemptions - earlier.preemptions,
	}
}

// work returns the commands and the CPU time of a difference of two readings, less the
// benchmark's own INFO and CLIENT LIST calls and the time the server spent executing them.
// Between two readings a server has counted one INFO: the earlier one.
func (s serverStats) work() (commands int64, cpu time.Duration) {
	return s.commands - s.adminCalls, s.cpu - s.adminTime
}

// stats reads INFO stats, cpu and commandstats from every primary, in the order of
// t.primaries, and the context switches of the process that INFO server names, which are
// the server's only if the server runs on this machine; under callgrind, also the
// instructions each has executed (its INFO call included).
func (t *target) stats(b *testing.B) []serverStats {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	all := make([]serverStats, len(t.primaries))
	for i, c := range t.primaries {
		info, err := c.Info(ctx, "server", "stats", "cpu", "commandstats").Result()
		if err == nil {
			all[i], err = parseStats(info)
		}
		if err != nil {
			b.Fatalf("INFO on %s: %v", c.Options().Addr, err)
		}
		if t.callgrind != "" {
			t.instructions[i] += dumpInstructions(b, t.callgrind, all[i].pid)
			all[i].instructions = t.instructions[i]
		}
		all[i].at = time.Now()
	}
	return all
}

// parseStats reads serverStats from an INFO reply with the server, stats, cpu and
// commandstats sections.
func parseStats(info string) (serverStats, error) {
	fields := make(map[string]string)
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	var s serverStats
	s.pid = fields["process_id"]
	s.wakeups, s.preemptions = contextSwitches(s.pid)
	var err error
	if s.commands, err = strconv.ParseInt(fields["total_commands_processed"], 10, 64); err != nil {
		return s, fmt.Errorf("total_commands_processed: %w", err)
	}
	for _, name := range []string{"used_cpu_sys", "used_cpu_user"} {
		sec, err := strconv.ParseFloat(fields[name], 64)
		if err != nil {
			return s, fmt.Errorf("%s: %w", name, err)
		}
		d := time.Duration(sec * float64(time.Second))
		s.cpu += d
		if name == "used_cpu_sys" {
			s.sys = d
		}
	}
	for _, name := range adminCommands {
		stat, ok := fields["cmdstat_"+name]
		if !ok {
			continue // never called yet
		}
		// calls=3,usec=52,usec_per_call=17.33,rejected_calls=0,failed_calls=0
		for kv := range strings.SplitSeq(stat, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls", "usec":
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return s, fmt.Errorf("cmdstat_%s %s: %w", name, k, err)
				}
				if k == "calls" {
					s.adminCalls += n
				} else {
					s.adminTime += time.Duration(n) * time.Microsecond
				}
			}
		}
	}
	return s, nil
}

// contextSwitches returns the voluntary and involuntary context switches of the main
// thread of the process pid, from /proc/<pid>/status, or zeros if that cannot be read.
func contextSwitches(pid string) (voluntary, involuntary int64) {
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if pid == "" || err != nil {
		return 0, 0
	}
	for line := range strings.Lines(string(status)) {
		k, v, _ := strings.Cut(line, ":")
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "voluntary_ctxt_switches":
			voluntary = n
		case "nonvoluntary_ctxt_switches":
			involuntary = n
		}
	}
	return voluntary, involuntary
}

// commandCounter reads the primaries' command counts now and returns a function that
// returns how many commands they have processed since, summed over the primaries. Commands
// run inside scripts count, as INFO's total_commands_processed counts them; the INFO calls
// that read the counts do not. Every other client of the servers counts too.
func (t *target) commandCounter(b *testing.B) func() int64 {
	b.Helper()
	before := t.stats(b)
	return func() int64 {
		b.Helper()
		var total int64
		for i, s := range t.stats(b) {
			n, _ := s.sub(before[i]).work()
			total += n
		}
		return total
	}
}

// deleteKeys deletes every key under the target's prefix on every primary, one DEL per
// key (a cluster rejects a DEL whose keys span slots), with a fresh context.
func (t *target) deleteKeys(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range t.primaries {
		iter := c.Scan(ctx, 0, t.prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				b.Errorf("cleanup: DEL %q on %s: %v", iter.Val(), c.Options().Addr, err)
			}
		}
		if err := iter.Err(); err != nil {
			b.Errorf("cleanup: SCAN on %s: %v", c.Options().Addr, err)
		}
	}
}

// idleWindow is how long idleWork watches the servers.
const idleWindow = time.Second

// idleWork watches t's primaries for idleWindow while the benchmark sends them nothing and
// returns the work each did, with its span: the servers' own background work (cron, the
// cluster bus), which the rows' figures include. A primary's span is its own, from its first
// reading to its second: under callgrind, reading the others' counters makes it longer than
// idleWindow.
func idleWork(b *testing.B, t *target) []serverStats {
	b.Helper()
	before := t.stats(b)
	time.Sleep(idleWindow) // the measurement's window
	after := t.stats(b)
	idle := make([]serverStats, len(after))
	for i := range after {
		idle[i] = after[i].sub(before[i])
	}
	return idle
}
