package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine running: every command closes its client.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// result is one run of the command.
type result struct {
	stdout, stderr string
	code           int
}

// runCLI runs args with the times read from Redis rounded to the minute in tables, no
// progress unless progressEvery is given, and no REDIS_URL from the environment.
func runCLI(t testing.TB, stdin io.Reader, progressEvery time.Duration, args ...string) result {
	t.Helper()
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	if progressEvery == 0 {
		progressEvery = time.Hour
	}
	var out, errOut bytes.Buffer
	c := &cli{
		stdin:         stdin,
		stdout:        &out,
		stderr:        &errOut,
		getenv:        func(string) string { return "" },
		progressEvery: progressEvery,
		grain:         time.Minute,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := c.run(ctx, args)
	return result{stdout: out.String(), stderr: errOut.String(), code: code}
}

// target is a Redis the tool is pointed at.
type target struct {
	url     string
	cluster bool
	prefix  string
	client  redis.UniversalClient
	// mini is the embedded server of a target on miniredis, nil otherwise.
	mini *miniredis.Miniredis
}

// locker returns a Locker on the target, with its prefix, closed when the test ends.
func (tg target) locker(t testing.TB, opts ...fencing.Option) *fencing.Locker {
	t.Helper()
	l := fencing.New(tg.client, append([]fencing.Option{fencing.WithPrefix(tg.prefix)}, opts...)...)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// args returns the command line for cmd on the target: cmd, the connection flags, rest.
func (tg target) args(cmd string, rest ...string) []string {
	a := []string{cmd, "-u", tg.url}
	if tg.cluster {
		a = append(a, "--cluster")
	}
	if tg.prefix != fencing.DefaultPrefix {
		a = append(a, "--prefix", tg.prefix)
	}
	return append(a, rest...)
}

// run runs cmd on the target and checks its exit code.
func (tg target) run(t testing.TB, wantCode int, cmd string, rest ...string) result {
	t.Helper()
	r := runCLI(t, nil, 0, tg.args(cmd, rest...)...)
	if r.code != wantCode {
		t.Fatalf("fencekit %s %q: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", cmd, rest, r.code, wantCode, r.stdout, r.stderr)
	}
	return r
}

// sharedTarget is the test's Redis from redistest: miniredis, or the real Redis named by
// FENCING_REDIS_ADDR (database 9) when it is set, with a key prefix of the test's own whose
// keys are deleted when it ends.
func sharedTarget(t *testing.T) target {
	t.Helper()
	r := redistest.New(t)
	return target{url: fmt.Sprintf("redis://%s/%d", r.Addr, r.DB), prefix: r.Prefix, client: r.Client, mini: r.Mini}
}

// clusterTarget is a private three-primary Redis Cluster, with the default prefix. It
// skips t when redis-server is missing.
func clusterTarget(t *testing.T) target {
	t.Helper()
	redisproc.Require(t)
	cl := redisproc.StartCluster(t, 3)
	addrs := cl.Addrs()
	url := "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	return target{url: url, cluster: true, prefix: fencing.DefaultPrefix, client: cl.Client(t)}
}

// forTargets runs fn on the test's Redis (sharedTarget) and on a private Cluster.
func forTargets(t *testing.T, fn func(t *testing.T, tg target)) {
	t.Run("redis", func(t *testing.T) { fn(t, sharedTarget(t)) })
	t.Run("cluster", func(t *testing.T) { fn(t, clusterTarget(t)) })
}

// golden compares got with testdata/name, or rewrites the file with -update. Each
// replacement pair is applied to got first (an address, a prefix).
func golden(t *testing.T, name, got string, replace ...string) {
	t.Helper()
	got = strings.NewReplacer(replace...).Replace(got)
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the tests with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s: got\n%s\nwant\n%s", name, got, want)
	}
}

// memoryColumn matches the sizes in the stats table, which vary with the Redis version.
var memoryColumn = regexp.MustCompile(`\d+(\.\d)? [KMG]?i?B +`)
