package bench_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/fencekit/fencekit/internal/redisproc"
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
}

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
	cl := redisproc.StartCluster(b, n)
	t := &target{
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
	// cpu is used_cpu_sys + used_cpu_user: the CPU time of the whole server process.
	cpu time.Duration
	// adminCalls and adminTime are the calls of adminCommands and the time the server spent
	// executing them (commandstats calls and usec).
	adminCalls int64
	adminTime  time.Duration
	// wakeups and preemptions are the voluntary and involuntary context switches of the
	// server's main thread, which runs its event loop: a wakeup ends a wait in epoll_wait, a
	// preemption is the kernel giving the CPU to another process. Read from
	// /proc/<process_id>/status, they are 0 when that cannot be read (not Linux).
	wakeups, preemptions int64
}

// sub returns the work done between an earlier reading and s.
func (s serverStats) sub(earlier serverStats) serverStats {
	return serverStats{
		commands:    s.commands - earlier.commands,
		cpu:         s.cpu - earlier.cpu,
		adminCalls:  s.adminCalls - earlier.adminCalls,
		adminTime:   s.adminTime - earlier.adminTime,
		wakeups:     s.wakeups - earlier.wakeups,
		preemptions: s.preemptions - earlier.preemptions,
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
// the server's only if the server runs on this machine.
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
	s.wakeups, s.preemptions = contextSwitches(fields["process_id"])
	var err error
	if s.commands, err = strconv.ParseInt(fields["total_commands_processed"], 10, 64); err != nil {
		return s, fmt.Errorf("total_commands_processed: %w", err)
	}
	for _, name := range []string{"used_cpu_sys", "used_cpu_user"} {
		sec, err := strconv.ParseFloat(fields[name], 64)
		if err != nil {
			return s, fmt.Errorf("%s: %w", name, err)
		}
		s.cpu += time.Duration(sec * float64(time.Second))
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

// idleWindow is how long idleCPU watches the servers.
const idleWindow = time.Second

// idleCPU watches t's primaries for idleWindow while the benchmark sends them nothing and
// returns the CPU time they used per second, summed over the primaries: the servers' own
// background work (cron, the cluster bus), which cpu-us/section includes.
func idleCPU(b *testing.B, t *target) time.Duration {
	b.Helper()
	before := t.stats(b)
	time.Sleep(idleWindow) // the measurement's window
	after := t.stats(b)
	var cpu time.Duration
	for i := range after {
		_, c := after[i].sub(before[i]).work()
		cpu += c
	}
	return time.Duration(float64(cpu) / idleWindow.Seconds())
}
