package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/redisproc"
)

// TestCheck runs check on a private redis-server: exit 0 with the default noeviction
// policy, exit 3 once maxmemory-policy is allkeys-lru, and --time-floor changes the
// verdict as it changes the Locker's.
func TestCheck(t *testing.T) {
	redisproc.Require(t)
	srv := redisproc.Start(t)
	tg := target{url: "redis://" + srv.Addr(), prefix: "fencing:"}
	// The port, of the same width, so that the table stays aligned.
	addr := []string{srv.Addr(), "127.0.0.1:" + strings.Repeat("N", len(strconv.Itoa(srv.Port())))}

	r := tg.run(t, exitOK, "check")
	golden(t, "check-safe.golden", r.stdout, addr...)
	r = tg.run(t, exitOK, "check", "--time-floor")
	golden(t, "check-time-floor.golden", r.stdout, addr...)

	if err := srv.Do(context.Background(), "CONFIG", "SET", "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	r = tg.run(t, exitUnsafe, "check")
	golden(t, "check-unsafe.golden", r.stdout, addr...)

	r = tg.run(t, exitUnsafe, "check", "--json")
	var got checkOutput
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v in\n%s", err, r.stdout)
	}
	if !got.Unsafe || len(got.Nodes) != 1 || !got.Nodes[0].Unsafe || got.Nodes[0].EvictionPolicy != "allkeys-lru" || !strings.Contains(got.Error, "allkeys-lru") {
		t.Errorf("got %+v", got)
	}
}

// TestCheckCluster checks every primary of a Cluster.
func TestCheckCluster(t *testing.T) {
	tg := clusterTarget(t)
	r := tg.run(t, exitOK, "check", "--json")
	var got checkOutput
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v in\n%s", err, r.stdout)
	}
	if len(got.Nodes) != 3 || got.Unsafe {
		t.Errorf("got %d nodes, unsafe %v; want 3, false", len(got.Nodes), got.Unsafe)
	}
	for _, n := range got.Nodes {
		if n.Role != "master" || n.EvictionPolicy != "noeviction" {
			t.Errorf("node %s: role %q, policy %q", n.Addr, n.Role, n.EvictionPolicy)
		}
	}
}

// TestUnreachable reports a connection failure with exit code 1.
func TestUnreachable(t *testing.T) {
	for _, cmd := range [][]string{{"locks"}, {"show", "x"}, {"check"}, {"release", "--force", "--yes", "x"}, {"stats"}} {
		r := runCLI(t, nil, 0, append(cmd, "-u", "redis://127.0.0.1:1/0")...)
		if r.code != exitError || !strings.Contains(r.stderr, "fencekit "+cmd[0]+":") {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and the command's name", cmd, r.code, r.stderr, exitError)
		}
	}
}

// TestRedisURLEnv takes the server from REDIS_URL when -u is not given, and -u wins over it.
func TestRedisURLEnv(t *testing.T) {
	var out, errOut strings.Builder
	c := &cli{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, now: time.Now, progressEvery: time.Hour,
		getenv: func(k string) string {
			if k == "REDIS_URL" {
				return "redis://127.0.0.1:1/0"
			}
			return ""
		}}
	if code := c.run(context.Background(), []string{"stats"}); code != exitError || !strings.Contains(errOut.String(), "127.0.0.1:1") {
		t.Errorf("REDIS_URL: exit %d, stderr %q; want %d and the address", code, errOut.String(), exitError)
	}
	redisproc.Require(t)
	srv := redisproc.Start(t)
	errOut.Reset()
	if code := c.run(context.Background(), []string{"stats", "-u", "redis://" + srv.Addr()}); code != exitOK {
		t.Errorf("-u over REDIS_URL: exit %d, stderr %q", code, errOut.String())
	}
}
