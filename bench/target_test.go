package bench_test

import (
	"context"
	"fmt"
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

// A target is the Redis that one family of rows runs against: one server, or the primaries
// of a cluster.
type target struct {
	// newClient returns a new client for one process; the caller closes it.
	newClient func() redis.UniversalClient
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
	options := func() *redis.Options {
		return &redis.Options{Addr: addr, DB: standaloneDB, DisableIdentity: true, MaintNotificationsConfig: noMaint}
	}
	admin := redis.NewClient(options())
	b.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.Ping(ctx).Err(); err != nil {
		b.Fatalf("ping %s: %v", addr, err)
	}
	t := &target{
		newClient: func() redis.UniversalClient { return redis.NewClient(options()) },
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
	if !redisproc.Available() {
		b.Skip("redis-server is not on PATH: the cluster rows start a local cluster with it")
	}
	cl := redisproc.StartCluster(b, 3)
	t := &target{
		newClient: func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DisableIdentity: true, MaintNotificationsConfig: noMaint})
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

// commandCounter reads the primaries' command counts now and returns a function that
// returns how many commands they have processed since, summed over the primaries. Commands
// run inside scripts count, as INFO's total_commands_processed counts them; the INFO calls
// that read the counts do not. Every other client of the servers counts too.
func (t *target) commandCounter(b *testing.B) func() int64 {
	b.Helper()
	before := t.commands(b)
	return func() int64 {
		b.Helper()
		// Between two readings each primary has counted one INFO: the earlier one.
		return t.commands(b) - before - int64(len(t.primaries))
	}
}

// commands sums total_commands_processed from INFO stats over the primaries.
func (t *target) commands(b *testing.B) int64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var total int64
	for _, c := range t.primaries {
		info, err := c.Info(ctx, "stats").Result()
		if err != nil {
			b.Fatalf("INFO stats on %s: %v", c.Options().Addr, err)
		}
		n, err := infoField(info, "total_commands_processed")
		if err != nil {
			b.Fatalf("INFO stats on %s: %v", c.Options().Addr, err)
		}
		total += n
	}
	return total
}

// infoField returns the integer field name of an INFO reply.
func infoField(info, name string) (int64, error) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no field %s", name)
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
