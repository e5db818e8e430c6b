package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
)

// TestCheck runs check on a private redis-server: exit 0 with the default noeviction
// policy, exit 3 once maxmemory-policy is allkeys-lru, and --time-floor changes the
// verdict as it changes the Locker's.
func TestCheck(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	srv := redisproc.Start(t)
	tg := target{url: "redis://" + srv.Addr(), prefix: "fencing:"}
	// The port, of the same width, so that the table stays aligned; the server and version,
	// in the last column, whatever the server.
	name, version := serverVersion(t, srv)
	addr := []string{srv.Addr(), "127.0.0.1:" + strings.Repeat("N", len(strconv.Itoa(srv.Port()))), name + " " + version, "SERVER VERSION"}

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
	if got.Nodes[0].Server != name || got.Nodes[0].Version != version {
		t.Errorf("--json: server %q version %q, want %q %q", got.Nodes[0].Server, got.Nodes[0].Version, name, version)
	}
}

// serverVersion returns the software and version of srv's executable, lower-cased, as its
// --version output reports them ("Redis server v=7.0.15 …", "Valkey server v=8.0.1 …"): a
// source independent of the INFO fields check reads.
func serverVersion(t *testing.T, srv *redisproc.Server) (name, version string) {
	t.Helper()
	text, err := srv.Do(context.Background(), "INFO", "server").Text()
	if err != nil {
		t.Fatal(err)
	}
	var exe string
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "executable:"); ok {
			exe = v
		}
	}
	out, err := exec.Command(exe, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", exe, err)
	}
	fields := strings.Fields(string(out))
	for _, f := range fields {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			version = v
		}
	}
	if len(fields) == 0 || version == "" {
		t.Fatalf("%s --version: %q", exe, out)
	}
	return strings.ToLower(fields[0]), version
}

// TestCheckManaged runs check the way a managed Redis or Valkey allows it. With CONFIG
// renamed away (rename-command CONFIG ""), check falls back to INFO, says what it could not
// read, names the server and exits 0. With an ACL user lacking +config and +info, the verdict
// is unknown, the error names the permissions needed, and check exits 1. Locking works in
// both cases.
func TestCheckManaged(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	t.Run("config-renamed", func(t *testing.T) {
		srv := redisproc.Start(t, redisproc.Args("--rename-command", "CONFIG", ""))
		name, version := serverVersion(t, srv)
		tg := target{url: "redis://" + srv.Addr(), prefix: "fencing:"}
		r := tg.run(t, exitOK, "check")
		for _, want := range []string{"noeviction", "no-aof", "CONFIG GET failed (ERR unknown command", "settings read from INFO; appendfsync and RDB save points unknown",
			name + " " + version, "Verdict: usable, but tokens can go back"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
			}
		}
		r = tg.run(t, exitOK, "check", "--json")
		var got checkOutput
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("%v in\n%s", err, r.stdout)
		}
		if n := got.Nodes[0]; got.Error != "" || n.EvictionPolicy != "noeviction" || n.AppendFsync != "" || n.Server != name || n.Version != version {
			t.Errorf("--json: got %+v", got)
		}
		lockOnce(t, srv.Client(t))
	})
	t.Run("acl-no-config-no-info", func(t *testing.T) {
		srv := redisproc.Start(t)
		if err := srv.Do(context.Background(), "ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-config", "-info").Err(); err != nil {
			t.Fatal(err)
		}
		tg := target{url: "redis://app:pw@" + srv.Addr(), prefix: "fencing:"}
		r := tg.run(t, exitError, "check")
		if !strings.Contains(r.stdout, "Verdict: unknown") || !strings.Contains(r.stderr, "+config|get or +info") || !strings.Contains(r.stderr, "NOPERM") {
			t.Errorf("got stdout:\n%s\nstderr:\n%s\nwant the verdict unknown and an error naming +config|get or +info", r.stdout, r.stderr)
		}
		lockOnce(t, srv.Client(t, func(o *redis.Options) { o.Username, o.Password = "app", "pw" }))
	})
}

// lockOnce takes and releases a lock through client, failing t on error.
func lockOnce(t *testing.T, client *redis.Client) {
	t.Helper()
	l := fencing.New(client)
	defer l.Close()
	lock, err := l.TryAcquire(context.Background(), "managed")
	if err != nil {
		t.Fatalf("cannot lock: %v", err)
	}
	if err := lock.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestCheckCluster checks every primary of a Cluster.
func TestCheckCluster(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	for _, cmd := range [][]string{{"locks"}, {"show", "x"}, {"check"}, {"release", "--force", "--yes", "x"}, {"stats"}} {
		r := runCLI(t, nil, 0, append(cmd, "-u", "redis://127.0.0.1:1/0")...)
		if r.code != exitError || !strings.Contains(r.stderr, "fencekit "+cmd[0]+":") {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and the command's name", cmd, r.code, r.stderr, exitError)
		}
	}
}

// TestRedisURLEnv takes the server from REDIS_URL when -u is not given, and -u wins over it.
func TestRedisURLEnv(t *testing.T) {
	t.Parallel()
	var out, errOut strings.Builder
	c := &cli{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, progressEvery: time.Hour,
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
