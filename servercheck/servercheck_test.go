package servercheck

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
)

// fakeConfig registers a CONFIG command on a miniredis, which has none: CONFIG GET answers
// from settings, or every CONFIG call fails with deny when it is set.
type fakeConfig struct {
	mu       sync.Mutex
	settings map[string]string
	deny     string
}

func (f *fakeConfig) set(k, v string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settings[k] = v
}

func newFakeConfig(t *testing.T, m *miniredis.Miniredis) *fakeConfig {
	t.Helper()
	f := &fakeConfig{settings: map[string]string{
		"maxmemory-policy": "noeviction", "maxmemory": "0", "appendonly": "yes",
		"appendfsync": "always", "save": "",
	}}
	err := m.Server().Register("CONFIG", func(c *server.Peer, cmd string, args []string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.deny != "" {
			c.WriteError(f.deny)
			return
		}
		if len(args) != 2 || !strings.EqualFold(args[0], "GET") {
			c.WriteError("ERR fake CONFIG knows only CONFIG GET <one parameter>")
			return
		}
		v, ok := f.settings[args[1]]
		if !ok {
			c.WriteMapLen(0)
			return
		}
		c.WriteMapLen(1)
		c.WriteBulk(args[1])
		c.WriteBulk(v)
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func auditLocker(t *testing.T, addr string, opts ...fencing.Option) *fencing.Locker {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	l := fencing.New(c, opts...)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// settingsOf returns the Settings of a Locker made with opts.
func settingsOf(opts ...fencing.Option) fencing.Settings {
	return fencing.New(redis.NewClient(&redis.Options{}), opts...).Settings()
}

// TestCheckMiniredis documents the behaviour on miniredis, which implements neither
// CONFIG nor INFO memory: an error, not ErrUnsafe, that says the server lacks them (no
// permission would help, so it gives no ACL hint), and a report naming the node.
func TestCheckMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	l := auditLocker(t, m.Addr())
	rep, err := Check(t.Context(), l)
	if err == nil || errors.Is(err, ErrUnsafe) {
		t.Fatalf("got %v, want an error that is not ErrUnsafe", err)
	}
	for _, want := range []string{"servercheck: " + m.Addr(), "CONFIG GET", "unknown command", "the server lacks CONFIG GET and the INFO"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "+config|get") {
		t.Errorf("error %q gives an ACL hint for commands the server lacks", err)
	}
	if len(rep.Nodes) != 1 || rep.Nodes[0].Addr != m.Addr() || rep.Nodes[0].EvictionPolicy != "" || !rep.TokensCanRegress || len(rep.Warnings) != 2 {
		t.Fatalf("got %+v, want one unread node %s that may regress, with two warnings (replication, settings)", rep, m.Addr())
	}
}

// TestCheckSettings runs Check against a miniredis with a fake CONFIG command.
func TestCheckSettings(t *testing.T) {
	m := miniredis.RunT(t)
	f := newFakeConfig(t, m)
	ctx := t.Context()

	rep, err := Check(ctx, auditLocker(t, m.Addr()))
	if err != nil {
		t.Fatalf("safe settings: %v", err)
	}
	n := rep.Nodes[0]
	if n.EvictionPolicy != "noeviction" || n.MaxMemory != 0 || !n.AppendOnly || n.AppendFsync != "always" || n.Persistence != "aof-always" {
		t.Fatalf("got %+v", n)
	}
	// miniredis answers INFO replication with an error: replicas are unknown.
	if !rep.TokensCanRegress || n.Replicas != -1 || len(rep.Warnings) != 2 {
		t.Fatalf("got regress %v replicas %d warnings %q, want true, -1 and 2 warnings", rep.TokensCanRegress, n.Replicas, rep.Warnings)
	}
	rep, err = Check(ctx, auditLocker(t, m.Addr(), fencing.WithServerTimeFloor()))
	if err != nil || rep.TokensCanRegress || len(rep.Warnings) != 1 {
		t.Fatalf("with the time floor: got %v regress %v warnings %q, want no error, false, 1 warning", err, rep.TokensCanRegress, rep.Warnings)
	}

	f.set("maxmemory-policy", "allkeys-lru")
	rep, err = Check(ctx, auditLocker(t, m.Addr(), fencing.WithServerTimeFloor()))
	if !errors.Is(err, ErrUnsafe) || !rep.Nodes[0].Unsafe || !strings.Contains(err.Error(), m.Addr()) {
		t.Fatalf("allkeys-lru: got %v (unsafe %v), want ErrUnsafe naming %s", err, rep.Nodes[0].Unsafe, m.Addr())
	}
	if !strings.HasPrefix(err.Error(), "servercheck: ") {
		t.Fatalf("error %q lacks the package prefix", err)
	}

	f.mu.Lock()
	f.deny = "NOPERM this user has no permissions to run the 'config|get' command"
	f.mu.Unlock()
	_, err = Check(ctx, auditLocker(t, m.Addr()))
	if err == nil || errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "needs +config|get or +info") {
		t.Fatalf("CONFIG denied and no INFO memory: got %v, want an error carrying NOPERM and the ACL hint", err)
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		t.Fatalf("the error %v does not wrap the Redis reply", err)
	}
}

func TestCheckInvalidAndUnreachable(t *testing.T) {
	if _, err := Check(t.Context(), fencing.New(nil)); !errors.Is(err, fencing.ErrInvalid) {
		t.Fatalf("nil client: got %v, want ErrInvalid", err)
	}
	if _, err := Check(t.Context(), nil); !errors.Is(err, fencing.ErrInvalid) {
		t.Fatalf("nil Locker: got %v, want ErrInvalid", err)
	}
	m := miniredis.RunT(t)
	addr := m.Addr()
	m.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	_, err := Check(t.Context(), fencing.New(c))
	if err == nil || isReply(err) || errors.Is(err, ErrUnsafe) {
		t.Fatalf("unreachable: got %v, want a connection error", err)
	}
}

// TestCheckRing checks every shard of a Ring and warns about the Ring itself.
func TestCheckRing(t *testing.T) {
	m1, m2 := miniredis.RunT(t), miniredis.RunT(t)
	f1, _ := newFakeConfig(t, m1), newFakeConfig(t, m2)
	f1.set("maxmemory-policy", "allkeys-random")
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": m1.Addr(), "b": m2.Addr()}, DisableIdentity: true})
	defer ring.Close()
	l := fencing.New(ring)
	defer l.Close()
	rep, err := Check(t.Context(), l)
	if !errors.Is(err, ErrUnsafe) || len(rep.Nodes) != 2 || !rep.TokensCanRegress {
		t.Fatalf("got %v, %d nodes, regress %v; want ErrUnsafe, 2 nodes, true", err, len(rep.Nodes), rep.TokensCanRegress)
	}
	if !slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, "Ring") }) {
		t.Fatalf("no Ring warning in %q", rep.Warnings)
	}
}

// TestAssess is the decision table of Check.
func TestAssess(t *testing.T) {
	type settings struct {
		policy, aof, fsync, save string
		role                     string
		replicas                 int
	}
	safe := settings{"noeviction", "yes", "always", "", "master", 0}
	cases := []struct {
		name     string
		s        settings
		opts     []fencing.Option
		unsafe   bool
		regress  bool
		persists string
		warnings int
	}{
		{"safe", safe, nil, false, false, "aof-always", 0},
		{"allkeys-lru", settings{"allkeys-lru", "yes", "always", "", "master", 0}, nil, true, true, "aof-always", 1},
		{"allkeys-lfu with floor", settings{"allkeys-lfu", "yes", "always", "", "master", 0}, []fencing.Option{fencing.WithServerTimeFloor()}, true, true, "aof-always", 1},
		{"allkeys-random upper case", settings{"ALLKEYS-RANDOM", "yes", "always", "", "master", 0}, nil, true, true, "aof-always", 1},
		{"volatile-lru", settings{"volatile-lru", "yes", "always", "", "master", 0}, nil, false, false, "aof-always", 1},
		{"volatile-ttl", settings{"volatile-ttl", "yes", "always", "", "master", 0}, nil, false, false, "aof-always", 1},
		{"no persistence", settings{"noeviction", "no", "everysec", "", "master", 0}, nil, false, true, "none", 1},
		{"no persistence with floor", settings{"noeviction", "no", "everysec", "", "master", 0}, []fencing.Option{fencing.WithServerTimeFloor()}, false, false, "none", 0},
		{"rdb", settings{"noeviction", "no", "everysec", "3600 1 300 100", "master", 0}, nil, false, true, "rdb", 1},
		{"everysec", settings{"noeviction", "yes", "everysec", "3600 1", "master", 0}, nil, false, true, "aof-everysec", 1},
		{"fsync no", settings{"noeviction", "yes", "no", "", "master", 0}, nil, false, true, "aof-no", 1},
		{"replica attached", settings{"noeviction", "yes", "always", "", "master", 2}, nil, false, true, "aof-always", 1},
		{"replicas acknowledged", settings{"noeviction", "yes", "always", "", "master", 2}, []fencing.Option{fencing.WithReplicas(2, time.Second)}, false, false, "aof-always", 0},
		{"too few acknowledgements", settings{"noeviction", "yes", "always", "", "master", 2}, []fencing.Option{fencing.WithReplicas(1, time.Second)}, false, true, "aof-always", 1},
		{"replicas with floor", settings{"noeviction", "yes", "always", "", "master", 2}, []fencing.Option{fencing.WithServerTimeFloor()}, false, false, "aof-always", 0},
		{"is a replica", settings{"noeviction", "yes", "always", "", "slave", 0}, nil, false, false, "aof-always", 1},
		{"unknown policy", settings{"", "yes", "always", "", "master", 0}, nil, false, false, "aof-always", 1},
		{"everything wrong", settings{"volatile-lfu", "no", "", "60 1", "master", 1}, nil, false, true, "rdb", 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := NodeReport{Replicas: -1, MaxMemory: -1}
			applyConfig(&n, map[string]string{
				"maxmemory-policy": tc.s.policy, "maxmemory": "1048576", "appendonly": tc.s.aof,
				"appendfsync": tc.s.fsync, "save": tc.s.save,
			})
			applyReplication(&n, parseInfo("# Replication\r\nrole:"+tc.s.role+"\r\nconnected_slaves:"+strconv.Itoa(tc.s.replicas)+"\r\n"))
			assess(&n, settingsOf(tc.opts...))
			if n.Unsafe != tc.unsafe || n.TokensCanRegress != tc.regress || n.Persistence != tc.persists || len(n.Warnings) != tc.warnings {
				t.Fatalf("got unsafe %v regress %v persistence %q warnings %q; want %v %v %q and %d warnings",
					n.Unsafe, n.TokensCanRegress, n.Persistence, n.Warnings, tc.unsafe, tc.regress, tc.persists, tc.warnings)
			}
			if n.MaxMemory != 1048576 {
				t.Fatalf("got maxmemory %d", n.MaxMemory)
			}
		})
	}
}

func TestApplyInfo(t *testing.T) {
	const text = "# Memory\r\nused_memory:1000\r\nmaxmemory:2048\r\nmaxmemory_policy:volatile-lru\r\n# Persistence\r\naof_enabled:1\r\n"
	var n NodeReport
	if !applyInfo(&n, parseInfo(text)) {
		t.Fatal("applyInfo rejected complete fields")
	}
	if n.EvictionPolicy != "volatile-lru" || n.MaxMemory != 2048 || !n.AppendOnly || n.Persistence != "aof" {
		t.Fatalf("got %+v", n)
	}
	if applyInfo(&n, parseInfo("maxmemory_policy:noeviction\r\n")) {
		t.Fatal("applyInfo accepted fields without aof_enabled")
	}
	if got := persistence(false, false, "", false, ""); got != "no-aof" {
		t.Fatalf("got %q, want no-aof", got)
	}
}

// FuzzParseInfo checks the INFO parser on any text: it never panics, keys are lower case
// and free of ':' and line breaks, and INFO text it formats itself parses back unchanged.
func FuzzParseInfo(f *testing.F) {
	f.Add("# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n", "role", "master")
	f.Add("", "", "")
	f.Add(":::\n#\n\r\n a : b \n", "k", "v:w")
	f.Fuzz(func(t *testing.T, text, key, value string) {
		for k, v := range parseInfo(text) {
			if k == "" || strings.ContainsAny(k, ":\r\n") || k != strings.ToLower(k) || strings.ContainsAny(v, "\r\n") {
				t.Fatalf("bad field %q:%q from %q", k, v, text)
			}
		}
		key, value = strings.TrimSpace(strings.ToLower(key)), strings.TrimSpace(value)
		if key == "" || key[0] == '#' || strings.ContainsAny(key, ":\r\n\v\f\u0085\u2028\u2029") || strings.ContainsAny(value, "\r\n\v\f\u0085\u2028\u2029") || key != strings.TrimSpace(key) {
			return
		}
		fields := parseInfo("# Section\r\n" + key + ":" + value + "\r\nother:1\r\n")
		if got, ok := fields[key]; !ok || got != value {
			t.Fatalf("%q:%q parsed back as %q (found %v)", key, value, got, ok)
		}
	})
}

// FuzzAssess feeds arbitrary settings to the decision: it never panics, every allkeys-*
// policy is refused, any other is not, and Persistence is one of the documented values.
func FuzzAssess(f *testing.F) {
	f.Add("noeviction", "1048576", "yes", "always", "", "role:master\r\nconnected_slaves:1\r\n", false, 0)
	f.Add("allkeys-lru", "x", "no", "", "3600 1", "", true, 1)
	f.Add("volatile-ttl", "-5", "YES", "everysec", " 60  1 ", "connected_slaves:-3", false, 3)
	f.Fuzz(func(t *testing.T, policy, maxmem, aof, fsync, save, repl string, floor bool, replicas int) {
		n := NodeReport{Replicas: -1, MaxMemory: -1}
		applyConfig(&n, map[string]string{"maxmemory-policy": policy, "maxmemory": maxmem, "appendonly": aof, "appendfsync": fsync, "save": save})
		applyReplication(&n, parseInfo(repl))
		assess(&n, fencing.Settings{ServerTimeFloor: floor, Replicas: max(replicas, 0)})
		if n.Unsafe != strings.HasPrefix(strings.ToLower(policy), "allkeys-") {
			t.Fatalf("policy %q: unsafe %v", policy, n.Unsafe)
		}
		if n.Unsafe && !n.TokensCanRegress {
			t.Fatalf("policy %q refused but tokens said not to regress", policy)
		}
		if !slices.Contains([]string{"aof-always", "aof-everysec", "aof-no", "aof", "rdb", "none"}, n.Persistence) {
			t.Fatalf("persistence %q", n.Persistence)
		}
		if n.MaxMemory < -1 || n.Replicas < -1 {
			t.Fatalf("maxmemory %d replicas %d", n.MaxMemory, n.Replicas)
		}
	})
}

// TestApplyServer names the server and its version from INFO server as Redis 7.0.15 and
// Valkey 8.0.1 answer it (Valkey also reports the Redis version it is compatible with).
func TestApplyServer(t *testing.T) {
	cases := []struct {
		name, text, server, version string
	}{
		{"redis", "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\nredis_mode:standalone\r\n", "redis", "7.0.15"},
		{"valkey", "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\nserver_mode:standalone\r\n", "valkey", "8.0.1"},
		{"other name, no version", "server_name:other\r\nredis_version:7.2.4\r\n", "other", ""},
		{"no version field", "# Server\r\nprocess_id:42\r\n", "", ""},
		{"empty", "", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var n NodeReport
			applyServer(&n, parseInfo(tc.text))
			if n.Server != tc.server || n.Version != tc.version {
				t.Fatalf("got %q %q, want %q %q", n.Server, n.Version, tc.server, tc.version)
			}
		})
	}
}
