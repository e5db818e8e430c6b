package faults_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/store"
)

// sharedEnv, when set to a role, makes TestMain run sharedChildMain instead of the tests: one
// process of the shared-mode tests, the test binary re-executed. The role "cmd" takes and
// releases locks as its stdin tells it (TestSharedFIFOProcesses); "loop" runs Do on one
// resource again and again, shared or exclusive, until its stdin ends or it has made its
// rounds (TestSharedWriterNotStarved, TestSharedReadersKilledAndStopped). The settings come in
// more variables, sharedEnv + "_" + a name: see childSettings.
const sharedEnv = "FENCEKIT_FAULTS_SHARED"

// childSettings are a child's settings, from its environment.
type childSettings struct {
	role     string
	addrs    []string      // one address, or a Cluster's
	prefix   string        // the Locker's key prefix
	resource string        // the resource locked
	ttl      time.Duration // the lease
	backoff  [2]time.Duration
	// loop only:
	shared     bool             // Shared, or exclusive
	goroutines int              // goroutines each running Do in a loop
	rounds     int              // Do calls per goroutine; 0: until stdin ends
	hold       [2]time.Duration // each section sleeps a random time in this range
	gap        [2]time.Duration // and the goroutine sleeps a random time in this range after Do
	store      string           // the key of a store.Redis record written at the end of each section, or ""
	check      string           // the hash-tagged prefix of sharedCheck's keys, or ""
}

func childSettingsFromEnv() (childSettings, error) {
	get := func(name string) string { return os.Getenv(sharedEnv + "_" + name) }
	s := childSettings{
		role: os.Getenv(sharedEnv), addrs: strings.Split(get("ADDRS"), ","), prefix: get("PREFIX"),
		resource: get("RESOURCE"), shared: get("KIND") == "shared", store: get("STORE"), check: get("CHECK"),
	}
	var err error
	if s.ttl, err = time.ParseDuration(get("TTL")); err != nil {
		return s, fmt.Errorf("TTL: %w", err)
	}
	pair := func(name string, into *[2]time.Duration) {
		v := get(name)
		if v == "" || err != nil {
			return
		}
		lo, hi, _ := strings.Cut(v, ",")
		if into[0], err = time.ParseDuration(lo); err == nil {
			into[1], err = time.ParseDuration(hi)
		}
	}
	pair("BACKOFF", &s.backoff)
	pair("HOLD", &s.hold)
	pair("GAP", &s.gap)
	if err != nil {
		return s, err
	}
	s.goroutines, _ = strconv.Atoi(get("GOROUTINES"))
	s.rounds, _ = strconv.Atoi(get("ROUNDS"))
	return s, nil
}

// env returns s as the environment of a child.
func (s childSettings) env() []string {
	kind := "x"
	if s.shared {
		kind = "shared"
	}
	pair := func(d [2]time.Duration) string {
		if d == [2]time.Duration{} {
			return ""
		}
		return d[0].String() + "," + d[1].String()
	}
	vars := map[string]string{
		"ADDRS": strings.Join(s.addrs, ","), "PREFIX": s.prefix, "RESOURCE": s.resource, "TTL": s.ttl.String(),
		"BACKOFF": pair(s.backoff), "KIND": kind, "GOROUTINES": strconv.Itoa(s.goroutines),
		"ROUNDS": strconv.Itoa(s.rounds), "HOLD": pair(s.hold), "GAP": pair(s.gap), "STORE": s.store, "CHECK": s.check,
	}
	env := append(os.Environ(), sharedEnv+"="+s.role)
	for k, v := range vars {
		env = append(env, sharedEnv+"_"+k+"="+v)
	}
	return env
}

// sharedChildMain is one child process; it returns the exit code. It prints what it does as
// lines "SH <verb> <fields>" on stdout (see childCmd and childLoop).
func sharedChildMain() int {
	s, err := childSettingsFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "shared child:", err)
		return 2
	}
	var client redis.UniversalClient
	if len(s.addrs) > 1 {
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.addrs, DisableIdentity: true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	} else {
		client = redis.NewClient(&redis.Options{Addr: s.addrs[0], DisableIdentity: true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	}
	defer client.Close()
	opts := []fencing.Option{fencing.WithPrefix(s.prefix), fencing.WithTTL(s.ttl)}
	if s.backoff[0] > 0 {
		opts = append(opts, fencing.WithRetryBackoff(s.backoff[0], s.backoff[1]))
	}
	l := fencing.New(client, opts...)
	defer l.Close()
	out := &childOut{}
	switch s.role {
	case "cmd":
		return childCmd(l, s, out)
	case "loop":
		return childLoop(client, l, s, out)
	}
	fmt.Fprintln(os.Stderr, "shared child: unknown role", s.role)
	return 2
}

// childOut prints a child's lines, one whole line per write.
type childOut struct{ mu sync.Mutex }

func (o *childOut) say(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Printf("SH "+format+"\n", args...)
}

// childCmd serves the lines of stdin: "ACQUIRE <id> <shared|x>" starts an Acquire (it prints
// "GOT <id> <token>", or "ERR <id> <error>"), "RELEASE <id>" releases that lock ("RELEASED
// <id> ok", or "ERR <id> <error>"). It prints "READY" first and returns at the end of stdin,
// releasing nothing (a test that ends early leaves the leases to run out).
func childCmd(l *fencing.Locker, s childSettings, out *childOut) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	locks := map[string]*fencing.Lock{}
	out.say("READY")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 3 && f[0] == "ACQUIRE":
			var opts []fencing.CallOption
			if f[2] == "shared" {
				opts = append(opts, fencing.Shared())
			}
			go func() {
				lock, err := l.Acquire(ctx, s.resource, opts...)
				if err != nil {
					out.say("ERR %s %v", f[1], err)
					return
				}
				mu.Lock()
				locks[f[1]] = lock
				mu.Unlock()
				out.say("GOT %s %d", f[1], lock.Token())
			}()
		case len(f) == 2 && f[0] == "RELEASE":
			mu.Lock()
			lock := locks[f[1]]
			mu.Unlock()
			if err := lock.Release(ctx); err != nil {
				out.say("ERR %s %v", f[1], err)
				continue
			}
			out.say("RELEASED %s ok", f[1])
		}
	}
	return 0
}

// childLoop runs s.goroutines goroutines, each calling Do on s.resource (shared or exclusive)
// s.rounds times, or until stdin ends. Each section prints
//
//	ENTER <r|w> <token> <server µs> <valid until µs> <wait µs> <readers at the request> <conflicts>
//
// once it has recorded its entry with sharedCheck (when s.check is set; the server's clock at
// entry, and the conflicts it found: -1 when the entry came after its own lease ended), sleeps
// its hold, then writes the store record (when s.store is set) with a context that is never
// cancelled, as a write already on its way would go out, and prints
//
//	WRITE <r|w> <token> <sent µs> <done µs> <ok|stale|error> <mark>
//
// then leaves (sharedCheck) and prints "LEAVE <r|w> <token> <µs> <valid until µs>". After Do
// returns it prints "DONE <r|w> <token> <Do's error matches ErrNotHeld> <Do's error>".
// Times are Unix microseconds of this host's clock, which the server shares. The readers at
// the request are those sharedCheck counted just before Do, for an exclusive loop; -1
// otherwise. It prints "BYE" at the end.
func childLoop(client redis.UniversalClient, l *fencing.Locker, s childSettings, out *childOut) int {
	var stop atomic.Bool
	if s.rounds == 0 {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop.Store(true)
		}()
	}
	kind, opts := "w", []fencing.CallOption(nil)
	if s.shared {
		kind, opts = "r", []fencing.CallOption{fencing.Shared()}
	}
	st := store.NewRedis(client)
	check := newSharedCheck(s.check)
	span := func(rng *rand.Rand, d [2]time.Duration) time.Duration {
		if d[1] <= d[0] {
			return d[0]
		}
		return d[0] + time.Duration(rng.Int64N(int64(d[1]-d[0])))
	}
	var wg sync.WaitGroup
	for g := range s.goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(g)))
			bg := context.Background()
			for n := 0; (s.rounds == 0 || n < s.rounds) && !stop.Load(); n++ {
				readers := int64(-1)
				if kind == "w" && check != nil {
					readers, _ = check.count(bg, client)
				}
				var token int64
				begin := time.Now()
				err := l.Do(bg, s.resource, func(ctx context.Context) error {
					token, _ = fencing.TokenFromContext(ctx)
					until, _ := fencing.ValidUntilFromContext(ctx)
					wait := time.Since(begin)
					now, conflicts := int64(0), int64(0)
					if check != nil {
						var err error
						if now, conflicts, err = check.enter(bg, client, kind, token, until); err != nil {
							return err
						}
					}
					out.say("ENTER %s %d %d %d %d %d %d", kind, token, now, until.UnixMicro(), wait.Microseconds(), readers, conflicts)
					time.Sleep(span(rng, s.hold))
					if s.store != "" {
						sent := time.Now()
						err := st.Write(bg, s.store, token, kind+strconv.FormatInt(token, 10))
						done := time.Now()
						outcome, mark := "ok", token
						var stale *store.StaleTokenError
						switch {
						case errors.As(err, &stale):
							outcome, mark = "stale", stale.Mark
						case err != nil:
							outcome, mark = "error", 0
							fmt.Fprintln(os.Stderr, "store write:", err)
						}
						out.say("WRITE %s %d %d %d %s %d", kind, token, sent.UnixMicro(), done.UnixMicro(), outcome, mark)
					}
					if check != nil {
						_ = check.leave(bg, client, kind, token)
					}
					until, _ = fencing.ValidUntilFromContext(ctx)
					out.say("LEAVE %s %d %d %d", kind, token, time.Now().UnixMicro(), until.UnixMicro())
					return nil
				}, opts...)
				out.say("DONE %s %d %t %v", kind, token, errors.Is(err, fencing.ErrNotHeld), err)
				if err != nil && !errors.Is(err, fencing.ErrNotHeld) {
					time.Sleep(10 * time.Millisecond) // Redis failing: do not spin
				}
				time.Sleep(span(rng, s.gap))
			}
		})
	}
	wg.Wait()
	out.say("BYE")
	return 0
}

// sharedCheckScript records the sections of shared and exclusive holders and counts
// conflicts, with the server's clock. KEYS[1]: a sorted set of the holders in their sections,
// member "<r|w>:<token>", score the end of the holder's lease by its own reckoning
// (fencing.ValidUntilFromContext, Unix µs); KEYS[2]: a hash of counts (sections, late,
// conflicts, most: the most readers at once); KEYS[3]: a list of the conflicts found.
// ARGV[1]: 'enter', 'leave' or 'count'; ARGV[2]: the kind, 'r' or 'w'; ARGV[3]: the token;
// ARGV[4]: for 'enter', the end of the holder's lease (Unix µs).
//
// Every call first drops the holders whose lease ended by the server's clock (TIME): a holder
// that was killed or stopped stays in the set exactly until its lease ends, as its place in the
// lock does (or sooner: its reckoning ends 1% early). 'enter' returns {now, conflicts}: the
// server time (µs) and how many holders in the set the new one may not hold beside (any
// other, for a writer; writers, for a reader), each logged; or {now, -1} without a check when
// the entrant's own lease ended before it entered (it was stopped between its grant and its
// entry, and is no holder any more). 'leave' removes the holder; 'count' returns how many
// holders are in their sections.
//
// The server and the children run on one host and read one clock (CLOCK_REALTIME), so the
// server's TIME and the children's Unix times compare directly, up to the clock's slew while
// a lease lasts (well below a millisecond per second; the lease's own reckoning keeps a
// margin of 1%, 10 ms for a 1 s lease). An entry is recorded after its acquisition returned,
// and a leave before the release is sent, so a recorded section lies inside the real hold: a
// conflict found is a real overlap, never an artefact of the recording.
const sharedCheckScript = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local op = ARGV[1]
if op == 'count' then
  return redis.call('ZCARD', KEYS[1])
end
local member = ARGV[2] .. ':' .. ARGV[3]
if op == 'leave' then
  return redis.call('ZREM', KEYS[1], member)
end
redis.call('HINCRBY', KEYS[2], 'sections', 1)
local ends = tonumber(ARGV[4])
if ends <= now then
  redis.call('HINCRBY', KEYS[2], 'late', 1)
  return {now, -1}
end
local conflicts = 0
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if ARGV[2] == 'w' or string.sub(m, 1, 1) == 'w' then
    conflicts = conflicts + 1
    redis.call('RPUSH', KEYS[3], string.format('%s entered at %.0f while %s held, valid until %s', member, now, m, redis.call('ZSCORE', KEYS[1], m)))
  end
end
if conflicts > 0 then
  redis.call('HINCRBY', KEYS[2], 'conflicts', conflicts)
end
redis.call('ZADD', KEYS[1], ARGV[4], member)
if ARGV[2] == 'r' then
  local n = redis.call('ZCARD', KEYS[1])
  if n > tonumber(redis.call('HGET', KEYS[2], 'most') or '0') then
    redis.call('HSET', KEYS[2], 'most', n)
  end
end
return {now, conflicts}
`

// sharedCheck runs sharedCheckScript on its keys.
type sharedCheck struct {
	keys   []string
	script *redis.Script
}

// newSharedCheck returns the check whose keys start with prefix (which holds a hash tag, for
// a Cluster), or nil for "".
func newSharedCheck(prefix string) *sharedCheck {
	if prefix == "" {
		return nil
	}
	return &sharedCheck{keys: []string{prefix + "holders", prefix + "stats", prefix + "conflicts"}, script: redis.NewScript(sharedCheckScript)}
}

func (c *sharedCheck) enter(ctx context.Context, client redis.UniversalClient, kind string, token int64, until time.Time) (now, conflicts int64, err error) {
	res, err := c.script.Run(ctx, client, c.keys, "enter", kind, token, until.UnixMicro()).Int64Slice()
	if err != nil || len(res) != 2 {
		return 0, 0, fmt.Errorf("check enter: %v %w", res, err)
	}
	return res[0], res[1], nil
}

func (c *sharedCheck) leave(ctx context.Context, client redis.UniversalClient, kind string, token int64) error {
	return c.script.Run(ctx, client, c.keys, "leave", kind, token).Err()
}

func (c *sharedCheck) count(ctx context.Context, client redis.UniversalClient) (int64, error) {
	return c.script.Run(ctx, client, c.keys, "count").Int64()
}

// stats returns the check's counts and the conflicts it logged.
func (c *sharedCheck) stats(t *testing.T, client redis.UniversalClient) (map[string]int64, []string) {
	t.Helper()
	ctx := context.Background()
	raw, err := client.HGetAll(ctx, c.keys[1]).Result()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for k, v := range raw {
		counts[k], _ = strconv.ParseInt(v, 10, 64)
	}
	conflicts, err := client.LRange(ctx, c.keys[2], 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return counts, conflicts
}

// sharedProc is the parent's handle on one child process: its lines, read as it prints them.
type sharedProc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed once the process has exited and its output is read

	mu    sync.Mutex
	lines [][]string   // the fields of its "SH" lines, after "SH"
	text  bytes.Buffer // all it printed, for failure messages
}

// startShared starts a child process with settings s. It is killed (by its process id) when
// t ends, if it has not exited.
func startShared(t *testing.T, name string, s childSettings) *sharedProc {
	t.Helper()
	p := &sharedProc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = s.env()
	p.cmd.SysProcAttr = childAttr()
	p.cmd.Stderr = p
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.text.WriteString(line + "\n")
			if f := strings.Fields(line); len(f) > 1 && f[0] == "SH" {
				p.lines = append(p.lines, f[1:])
			}
			p.mu.Unlock()
		}
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s (pid %d) did not exit after SIGKILL", name, p.cmd.Process.Pid)
		}
	})
	return p
}

// Write collects the child's stderr.
func (p *sharedProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.text.Write(b)
}

// output returns everything the child printed so far.
func (p *sharedProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.text.String()
}

// snapshot returns the child's lines so far.
func (p *sharedProc) snapshot() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lines[:len(p.lines):len(p.lines)]
}

// send writes a line to the child's stdin.
func (p *sharedProc) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		t.Fatalf("%s: stdin: %v", p.name, err)
	}
}

// await waits up to d for a line from index from on that match accepts, and returns its index
// and fields. It fails t on timeout, or when the child exits first.
func (p *sharedProc) await(t *testing.T, from int, d time.Duration, what string, match func([]string) bool) (int, []string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		lines := p.snapshot()
		for i := from; i < len(lines); i++ {
			if match(lines[i]) {
				return i, lines[i]
			}
		}
		from = len(lines)
		select {
		case <-p.done:
			if lines := p.snapshot(); len(lines) == from {
				t.Fatalf("%s exited while waiting for %s:\n%s", p.name, what, p.output())
			}
			continue
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %s within %v:\n%s", p.name, what, d, p.output())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// signal sends sig to the child by its process id.
func (p *sharedProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: %v: %v", p.name, sig, err)
	}
}

// exited waits up to d for the child to exit and reports whether it did.
func (p *sharedProc) exited(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// verb returns a matcher of lines with that verb whose following fields start with fields.
func verb(v string, fields ...string) func([]string) bool {
	return func(f []string) bool {
		if len(f) < 1+len(fields) || f[0] != v {
			return false
		}
		for i, want := range fields {
			if f[1+i] != want {
				return false
			}
		}
		return true
	}
}

// atoi64 parses a decimal field, 0 when malformed.
func atoi64(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
