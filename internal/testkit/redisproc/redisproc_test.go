package redisproc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/internal/testkit/redisproc"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// No server may have written to the package directory.
		for _, name := range []string{"dump.rdb", "appendonlydir", "appendonly.aof", "nodes.conf"} {
			if _, err := os.Stat(name); err == nil {
				fmt.Fprintf(os.Stderr, "redisproc: %s was left in the working directory\n", name)
				code = 1
			}
		}
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestStartPing(t *testing.T) {
	t.Parallel()
	s := redisproc.Start(t)
	c := ctx(t)
	if got, err := s.Client(t).Ping(c).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING: got %q, %v; want PONG", got, err)
	}
	if s.PID() <= 0 {
		t.Errorf("PID: got %d, want > 0", s.PID())
	}
	if want := fmt.Sprintf("127.0.0.1:%d", s.Port()); s.Addr() != want {
		t.Errorf("Addr: got %q, want %q", s.Addr(), want)
	}
	dir, err := s.Client(t).ConfigGet(c, "dir").Result()
	if err != nil || dir["dir"] != s.Dir() {
		t.Errorf("CONFIG GET dir: got %q, %v; want %q", dir, err, s.Dir())
	}
	// DEBUG is enabled for local connections.
	if err := s.Do(c, "DEBUG", "SLEEP", "0").Err(); err != nil {
		t.Errorf("DEBUG SLEEP 0: %v", err)
	}
	if !strings.Contains(s.LogTail(), "Ready to accept connections") {
		t.Errorf("LogTail lacks the ready line:\n%s", s.LogTail())
	}
}

func TestKillRestart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts []redisproc.Option
		want string // value after the restart; "" means the key is gone
	}{
		{name: "aof always keeps the key", opts: []redisproc.Option{redisproc.Args("--appendonly", "yes", "--appendfsync", "always")}, want: "v"},
		{name: "no persistence loses the key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := redisproc.Start(t, tt.opts...)
			client := s.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
			c := ctx(t)
			if err := client.Set(c, "k", "v", 0).Err(); err != nil {
				t.Fatalf("SET: %v", err)
			}
			pid, port := s.PID(), s.Port()
			s.Kill()
			if s.PID() != 0 {
				t.Errorf("PID after Kill: got %d, want 0", s.PID())
			}
			if conn, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
				conn.Close()
				t.Fatalf("dial %s after Kill: got a connection, want refused", s.Addr())
			}
			s.Restart()
			if s.PID() == pid || s.Port() != port {
				t.Errorf("after Restart: pid %d port %d, want a new pid and port %d", s.PID(), s.Port(), port)
			}
			got, err := client.Get(c, "k").Result()
			if errors.Is(err, redis.Nil) {
				got, err = "", nil
			}
			if err != nil || got != tt.want {
				t.Fatalf("GET k after Restart: got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestStopRestart(t *testing.T) {
	t.Parallel()
	s := redisproc.Start(t, redisproc.Args("--appendonly", "yes", "--appendfsync", "everysec"))
	client := s.Client(t)
	c := ctx(t)
	if err := client.Set(c, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	s.Stop() // a clean shutdown flushes the AOF even with everysec
	if s.PID() != 0 {
		t.Errorf("PID after Stop: got %d, want 0", s.PID())
	}
	s.Restart()
	if got, err := client.Get(c, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k after Stop and Restart: got %q, %v; want v", got, err)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := redisproc.Start(t)
	client := s.Client(t, func(o *redis.Options) {
		o.ReadTimeout = 200 * time.Millisecond
		o.MaxRetries = -1
	})
	c := ctx(t)
	if err := client.Ping(c).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	s.Pause()
	start := time.Now()
	err := client.Ping(c).Err()
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		s.Resume()
		t.Fatalf("PING while paused: got %v, want a timeout", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("PING while paused failed after %v, before the 200ms read timeout", d)
	}
	s.Resume()
	if err := client.Ping(c).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}

	// A paused server can still be killed and restarted.
	s.Pause()
	s.Kill()
	s.Restart()
	if err := client.Ping(c).Err(); err != nil {
		t.Fatalf("PING after Pause, Kill and Restart: %v", err)
	}
}

// TestUnder runs the server under nice, which lowers its priority and runs it in its own
// process: the server's process must have that priority, before and after a restart.
func TestUnder(t *testing.T) {
	t.Parallel()
	s := redisproc.Start(t, redisproc.Under("nice", "-n", "7"))
	c := ctx(t)
	for _, when := range []string{"after Start", "after Restart"} {
		if err := s.Client(t).Ping(c).Err(); err != nil {
			t.Fatalf("PING %s: %v", when, err)
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.PID()))
		if err != nil {
			t.Skipf("cannot read the server's state (no /proc?): %v", err)
		}
		// The fields after the command name, which is in parentheses: nice is the 17th.
		nice := ""
		if fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(fields) >= 17 {
			nice = fields[16]
		}
		if nice != "7" {
			t.Errorf("%s: process %d has nice %q, want 7: not run under nice", when, s.PID(), nice)
		}
		s.Kill()
		s.Restart()
	}
}

func TestRestartWaitsForBusyPort(t *testing.T) {
	t.Parallel()
	s := redisproc.Start(t)
	s.Kill()
	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatalf("listen on the killed server's port: %v", err)
	}
	release := time.AfterFunc(300*time.Millisecond, func() { l.Close() })
	defer release.Stop()
	start := time.Now()
	s.Restart()
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("Restart returned after %v, while the port was still taken", d)
	}
	if err := s.Do(ctx(t), "PING").Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

// fatalRecorder is a testing.TB whose Fatalf records the message and ends the goroutine.
type fatalRecorder struct {
	testing.TB
	msg chan string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg <- fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestStartFailureShowsLog(t *testing.T) {
	t.Parallel()
	rec := &fatalRecorder{TB: t, msg: make(chan string, 1)}
	go func() {
		redisproc.Start(rec, redisproc.Args("--no-such-directive", "x"))
		rec.msg <- "Start returned"
	}()
	select {
	case msg := <-rec.msg:
		for _, want := range []string{"FATAL CONFIG FILE ERROR", "no-such-directive"} {
			if !strings.Contains(msg, want) {
				t.Errorf("Start failure message lacks %q:\n%s", want, msg)
			}
		}
	case <-ctx(t).Done():
		t.Fatal("Start neither failed nor returned")
	}
}

func TestReplicaPromote(t *testing.T) {
	t.Parallel()
	primary := redisproc.Start(t)
	replica := redisproc.Start(t, redisproc.ReplicaOf(primary))
	pc, rc := primary.Client(t), replica.Client(t)
	c := ctx(t)

	if err := pc.Set(c, "k", "v1", 0).Err(); err != nil {
		t.Fatalf("SET on primary: %v", err)
	}
	primary.WaitSynced(replica)
	if got, err := rc.Get(c, "k").Result(); err != nil || got != "v1" {
		t.Fatalf("GET k on replica: got %q, %v; want v1", got, err)
	}
	if err := rc.Set(c, "k", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
		t.Fatalf("SET on replica: got %v, want a READONLY error", err)
	}

	replica.Promote()
	if err := rc.Set(c, "k", "v2", 0).Err(); err != nil {
		t.Fatalf("SET on promoted replica: %v", err)
	}

	// The old primary follows the promoted one and takes its data.
	primary.ReplicaOf(replica)
	if got, err := pc.Get(c, "k").Result(); err != nil || got != "v2" {
		t.Fatalf("GET k on old primary: got %q, %v; want v2", got, err)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redisproc.StartCluster(t, 3)
	nodes := cl.Nodes()
	if len(nodes) != 3 {
		t.Fatalf("Nodes: got %d, want 3", len(nodes))
	}
	client := cl.Client(t)
	c := ctx(t)

	const keys = 60
	for i := range keys {
		if err := client.Set(c, fmt.Sprintf("key-%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET key-%d: %v", i, err)
		}
	}
	total := int64(0)
	for _, node := range nodes {
		n, err := node.Do(c, "DBSIZE").Int64()
		if err != nil {
			t.Fatalf("DBSIZE on %s: %v", node.Addr(), err)
		}
		if n == 0 {
			t.Errorf("node %s holds no keys; want keys spread over every node", node.Addr())
		}
		total += n
	}
	if total != keys {
		t.Errorf("keys over all nodes: got %d, want %d", total, keys)
	}

	// Keys in different slots: the cluster client sends MSET to the node of the first
	// key, which rejects it.
	if err := client.MSet(c, "a", "b", "c", "d").Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Errorf("MSET a b c d: got %v, want CROSSSLOT", err)
	}
	owner := cl.NodeFor("a")
	if err := owner.Do(c, "MSET", "a", "b", "c", "d").Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Errorf("MSET a b c d on %s: got %v, want CROSSSLOT", owner.Addr(), err)
	}
	// The same holds for a script.
	err := client.Eval(c, "return redis.call('MSET', KEYS[1], 1, KEYS[2], 2)", []string{"a", "c"}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Errorf("EVAL on keys a and c: got %v, want CROSSSLOT", err)
	}
	// Hash tags put both keys in one slot.
	if err := client.MSet(c, "{t}a", "b", "{t}c", "d").Err(); err != nil {
		t.Errorf("MSET {t}a b {t}c d: %v", err)
	}
}

func TestClusterNodeRestart(t *testing.T) {
	t.Parallel()
	cl := redisproc.StartCluster(t, 3, redisproc.Args("--appendonly", "yes", "--appendfsync", "always"))
	client := cl.Client(t)
	c := ctx(t)
	if err := client.Set(c, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	node := cl.NodeFor("k")
	pid := node.PID()
	cl.RestartNode(node)
	if node.PID() == pid || cl.NodeFor("k") != node {
		t.Errorf("after RestartNode: pid %d (was %d), k served by %s; want a new pid and %s", node.PID(), pid, cl.NodeFor("k").Addr(), node.Addr())
	}
	if got, err := client.Get(c, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k after restarting %s: got %q, %v; want v", node.Addr(), got, err)
	}
}

func TestClusterReplicasFailover(t *testing.T) {
	t.Parallel()
	cl := redisproc.StartCluster(t, 3, redisproc.ClusterReplicas(1))
	primaries, replicas := cl.Nodes(), cl.Replicas()
	if len(primaries) != 3 || len(replicas) != 3 || len(cl.AllNodes()) != 6 {
		t.Fatalf("got %d primaries, %d replicas, %d nodes; want 3, 3, 6", len(primaries), len(replicas), len(cl.AllNodes()))
	}
	if got := cl.Primaries(); !slices.Equal(got, primaries) {
		t.Fatalf("Primaries: got %v, want %v", addrs(got), addrs(primaries))
	}
	for i, p := range primaries {
		if got := cl.ReplicasOf(p); len(got) != 1 || got[0] != replicas[i] {
			t.Fatalf("ReplicasOf(%s): got %v, want [%s]", p.Addr(), addrs(got), replicas[i].Addr())
		}
	}
	c := ctx(t)
	// StartCluster returns once the shard ids have settled: every node groups each replica
	// with its primary (a node killed before that cannot restart: see shardsSplit).
	for _, node := range cl.AllNodes() {
		shards, err := node.Client(t).ClusterShards(c).Result()
		if err != nil {
			if strings.Contains(strings.ToLower(err.Error()), "unknown subcommand") {
				break // before Redis 7.0: no shard ids
			}
			t.Fatalf("CLUSTER SHARDS on %s: %v", node.Addr(), err)
		}
		if len(shards) != 3 {
			t.Errorf("%s sees %d shards, want 3", node.Addr(), len(shards))
		}
		for _, sh := range shards {
			if len(sh.Nodes) != 2 || sh.Nodes[0].Role == sh.Nodes[1].Role {
				t.Errorf("%s sees a shard of %+v, want a primary and its replica", node.Addr(), sh.Nodes)
			}
		}
	}
	client := cl.Client(t)
	if err := client.Set(c, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	old := cl.NodeFor("k")
	replica := cl.ReplicasOf(old)[0]
	// A replica answers DBSIZE without a redirection: the key reached it.
	if err := waitTrue(c, func() bool { return replica.Do(c, "DBSIZE").Val() == int64(1) }); err != nil {
		t.Fatalf("DBSIZE on the replica %s: want 1: %v", replica.Addr(), err)
	}

	cl.Failover(replica)
	if got := cl.NodeFor("k"); got != replica {
		t.Fatalf("after Failover: k served by %s, want the promoted %s", got.Addr(), replica.Addr())
	}
	if got := cl.ReplicasOf(replica); len(got) != 1 || got[0] != old {
		t.Fatalf("after Failover: ReplicasOf(%s) = %v, want the old primary %s", replica.Addr(), addrs(got), old.Addr())
	}
	if !slices.Contains(cl.Primaries(), replica) || slices.Contains(cl.Primaries(), old) {
		t.Fatalf("after Failover: Primaries %v, want %s in and %s out", addrs(cl.Primaries()), replica.Addr(), old.Addr())
	}
	if got, err := client.Get(c, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k after Failover: got %q, %v; want v", got, err)
	}
	if err := client.Set(c, "k", "w", 0).Err(); err != nil {
		t.Fatalf("SET k after Failover: %v", err)
	}
	if role := old.Do(c, "ROLE").Val(); fmt.Sprint(role) == "" || !strings.HasPrefix(fmt.Sprint(role), "[slave") {
		t.Errorf("ROLE on the old primary: got %v, want slave", role)
	}
}

func TestClusterMigrateSlot(t *testing.T) {
	t.Parallel()
	cl := redisproc.StartCluster(t, 3)
	client := cl.Client(t)
	c := ctx(t)
	const keys = 150 // more than one MIGRATE batch
	for i := range keys {
		if err := client.Set(c, fmt.Sprintf("{tag}:%d", i), i, time.Hour).Err(); err != nil {
			t.Fatalf("SET: %v", err)
		}
	}
	if err := client.Set(c, "other", "x", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	from := cl.NodeFor("{tag}")
	var to *redisproc.Server
	for _, n := range cl.Nodes() {
		if n != from {
			to = n
			break
		}
	}
	slot := cl.Slot("{tag}")
	cl.MigrateKey("{tag}", to)
	if got := cl.NodeFor("{tag}:7"); got != to {
		t.Fatalf("after MigrateKey: {tag} served by %s, want %s", got.Addr(), to.Addr())
	}
	if got := cl.SlotOwner(slot); got != to {
		t.Fatalf("SlotOwner(%d): %s, want %s", slot, got.Addr(), to.Addr())
	}
	for node, want := range map[*redisproc.Server]int64{from: 0, to: keys} {
		if n, err := node.Do(c, "CLUSTER", "COUNTKEYSINSLOT", slot).Int64(); err != nil || n != want {
			t.Errorf("COUNTKEYSINSLOT %d on %s: got %d, %v; want %d", slot, node.Addr(), n, err, want)
		}
	}
	if got, err := client.Get(c, "{tag}:42").Result(); err != nil || got != "42" {
		t.Fatalf("GET {tag}:42 after the migration: got %q, %v; want 42", got, err)
	}
	if ttl, err := client.TTL(c, "{tag}:42").Result(); err != nil || ttl <= 0 {
		t.Errorf("TTL {tag}:42 after the migration: got %v, %v; want the key's TTL kept", ttl, err)
	}
	if got, err := client.Get(c, "other").Result(); err != nil || got != "x" {
		t.Errorf("GET other: got %q, %v; want x", got, err)
	}
	cl.MigrateKey("{tag}", to) // already there: nothing to do
	cl.MigrateSlot(slot, from) // and back
	if got := cl.NodeFor("{tag}"); got != from {
		t.Fatalf("after migrating back: {tag} served by %s, want %s", got.Addr(), from.Addr())
	}
	cl.WaitOK()
}

// waitTrue polls cond until it holds or c ends.
func waitTrue(c context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-c.Done():
			return c.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func addrs(nodes []*redisproc.Server) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Addr()
	}
	return out
}
