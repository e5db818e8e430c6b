package fencing

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/redistest"
)

// scriptLog is a go-redis hook that records which of the package's scripts a client runs,
// and the hand-off script's replies.
type scriptLog struct {
	mu       sync.Mutex
	runs     map[string]int
	handoffs []any
	after    func(name string) // called after each script, before its reply reaches the caller
	refuse   string            // if set, answer the hand-off script with this error, unrun
}

// refusal is an error reply from Redis, as go-redis reports one.
type refusal string

func (e refusal) Error() string { return string(e) }
func (refusal) RedisError()     {}

func (s *scriptLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *scriptLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (s *scriptLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	scripts := map[string]*redis.Script{"acquire": acquireScript, "release": releaseScript, "handoff": handoffScript}
	sources := map[string]string{"acquire": acquireSrc, "release": releaseSrc, "handoff": handoffSrc}
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		s.mu.Lock()
		refuse := s.refuse != "" && len(args) > 1 && (args[1] == handoffScript.Hash() || args[1] == handoffSrc)
		msg := s.refuse
		s.mu.Unlock()
		if refuse {
			s.mu.Lock()
			s.runs["refused"]++
			s.mu.Unlock()
			cmd.SetErr(refusal(msg))
			return cmd.Err()
		}
		err := next(ctx, cmd)
		if len(args) < 2 || (cmd.Name() != "evalsha" && cmd.Name() != "eval") || err != nil {
			return err
		}
		for name, sc := range scripts {
			if args[1] != sc.Hash() && args[1] != sources[name] {
				continue
			}
			s.mu.Lock()
			s.runs[name]++
			if name == "handoff" {
				s.handoffs = append(s.handoffs, cmd.(*redis.Cmd).Val())
			}
			after := s.after
			s.mu.Unlock()
			if after != nil {
				after(name)
			}
		}
		return err
	}
}

// settle waits until no acquire script has run for 200ms and returns how many ran.
func (s *scriptLog) settle(t *testing.T) int {
	t.Helper()
	n, since := s.count("acquire"), time.Now()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := s.count("acquire"); m != n {
			n, since = m, time.Now()
		} else if time.Since(since) >= 200*time.Millisecond {
			return n
		}
	}
	t.Fatal("acquire scripts kept running for 5s")
	return 0
}

func (s *scriptLog) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[name]
}

// lockerWithLog returns a Locker on r whose client records its scripts; polling is too slow
// (5s) to explain a quick hand-off.
func lockerWithLog(t *testing.T, r *redistest.Redis) (*Locker, *scriptLog) {
	t.Helper()
	log := &scriptLog{runs: make(map[string]int)}
	c := r.NewClient(t)
	c.AddHook(log)
	l := New(c, WithPrefix(r.Prefix), WithRetryBackoff(5*time.Second, 10*time.Second))
	t.Cleanup(func() { _ = l.Close() })
	return l, log
}

// waitQueued waits until l has n waiters for resource and Redis has confirmed its
// subscription to the resource's release channel.
func waitQueued(t *testing.T, l *Locker, resource string, n int) {
	t.Helper()
	ch := resourceKeys(l.cfg.prefix, resource).channel
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.hub.mu.Lock()
		q := l.hub.queues[ch]
		ok := q != nil && q.isReady && len(q.waiters) == n
		l.hub.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiter(s) for %q with a confirmed subscription: not within 5s", n, resource)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// hold takes the lock on "res" for the test.
func hold(t *testing.T, l *Locker) *Lock {
	t.Helper()
	lock, err := l.TryAcquire(t.Context(), "res")
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	return lock
}

type result struct {
	lock *Lock
	err  error
}

func acquireInBackground(ctx context.Context, l *Locker, resource string, opts ...Option) <-chan result {
	ch := make(chan result, 1)
	go func() {
		lock, err := l.Acquire(ctx, resource, opts...)
		ch <- result{lock, err}
	}()
	return ch
}

func receive(t *testing.T, ch <-chan result, within time.Duration) result {
	t.Helper()
	select {
	case res := <-ch:
		return res
	case <-time.After(within):
		t.Fatalf("Acquire did not return within %v", within)
		return result{}
	}
}

func TestReleaseHandsOffToLocalWaiter(t *testing.T) {
	r := redistest.New(t)
	ctx := t.Context()
	l, log := lockerWithLog(t, r)
	k := resourceKeys(r.Prefix, "res")

	held := hold(t, l)
	got := acquireInBackground(ctx, l, "res", WithTTL(7*time.Second))
	waitQueued(t, l, "res", 1)
	// The waiter tries once more when the subscription is confirmed; with a 5s back-off it
	// then stays quiet until woken.
	acquires := log.settle(t)
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	res := receive(t, got, 2*time.Second) // the back-off is 5s: only the hand-off is this quick
	if res.err != nil {
		t.Fatalf("Acquire: %v", res.err)
	}
	next := res.lock
	if next.Token() != held.Token()+1 {
		t.Fatalf("got token %d, want %d", next.Token(), held.Token()+1)
	}
	if n := log.count("acquire"); n != acquires {
		t.Errorf("the waiter ran the acquire script %d more time(s) after the release; the hand-off should spare it", n-acquires)
	}
	if n := log.count("handoff"); n != 1 {
		t.Errorf("hand-off script runs: got %d, want 1", n)
	}
	if v := r.Client.Get(ctx, k.lock).Val(); !strings.HasPrefix(v, next.owner) {
		t.Errorf("lock value %q: want the waiter's owner %q", v, next.owner)
	}
	if ttl := r.Client.PTTL(ctx, k.lock).Val(); ttl <= 6*time.Second || ttl > 7*time.Second {
		t.Errorf("lock TTL %v: want the waiter's 7s lease", ttl)
	}
	if err := held.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("second Release by the old holder: got %v, want ErrNotHeld", err)
	}
	if err := next.Extend(ctx, time.Minute); err != nil {
		t.Errorf("Extend by the new holder: %v", err)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatalf("Release by the new holder: %v", err)
	}
	if n := r.Client.Exists(ctx, k.lock).Val(); n != 0 {
		t.Error("the lock is still there after the new holder released it")
	}
}

func TestNoHandOffWhileOtherLockersListen(t *testing.T) {
	r := redistest.New(t)
	ctx := t.Context()
	l, log := lockerWithLog(t, r)
	other := New(r.Client, WithPrefix(r.Prefix)) // another process, as far as Redis can tell
	t.Cleanup(func() { _ = other.Close() })

	held := hold(t, l)
	local := acquireInBackground(ctx, l, "res")
	remote := acquireInBackground(ctx, other, "res")
	waitQueued(t, l, "res", 1)
	waitQueued(t, other, "res", 1)
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	log.mu.Lock()
	replies := append([]any(nil), log.handoffs...)
	log.mu.Unlock()
	if len(replies) != 1 {
		t.Fatalf("hand-off script replies: %v, want one", replies)
	}
	if arr, _ := replies[0].([]any); len(arr) != 2 || arr[0] != int64(1) {
		t.Fatalf("hand-off script reply %v: want {1, n}, a plain release, while another Locker listens", replies[0])
	}
	// Both waiters get the lock in turn, with the next tokens.
	tokens := map[int64]bool{}
	for range 2 {
		var res result
		select {
		case res = <-local:
		case res = <-remote:
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter did not get the lock within 5s")
		}
		if res.err != nil {
			t.Fatal(res.err)
		}
		tokens[res.lock.Token()] = true
		if err := res.lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !tokens[held.Token()+1] || !tokens[held.Token()+2] {
		t.Fatalf("tokens %v, want %d and %d", tokens, held.Token()+1, held.Token()+2)
	}
}

func TestNoHandOffForTimeFloorWaiter(t *testing.T) {
	r := redistest.New(t)
	ctx := t.Context()
	l, log := lockerWithLog(t, r)
	held := hold(t, l)
	got := acquireInBackground(ctx, l, "res", WithServerTimeFloor())
	waitQueued(t, l, "res", 1)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	res := receive(t, got, 2*time.Second)
	if res.err != nil {
		t.Fatal(res.err)
	}
	defer res.lock.Release(ctx)
	if n := log.count("handoff"); n != 0 {
		t.Errorf("hand-off script runs: got %d, want 0 for a waiter that needs the time floor", n)
	}
	if res.lock.Token() < 1_000_000_000_000_000 {
		t.Errorf("got token %d, want one at or above the server clock in µs", res.lock.Token())
	}
}

// TestUndeliveredHandOffIsReleased: a lock handed to a waiter that leaves without taking it
// is released, not left until its TTL.
func TestUndeliveredHandOffIsReleased(t *testing.T) {
	r := redistest.New(t)
	ctx := t.Context()
	l, _ := lockerWithLog(t, r)
	k := resourceKeys(r.Prefix, "res")
	held := hold(t, l)
	cfg := l.cfg
	q, w, err := l.hub.join(ctx, k.channel, &cfg) // a waiter that never looks at its grant
	if err != nil {
		t.Fatal(err)
	}
	waitQueued(t, l, "res", 1)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if len(w.grant) != 1 {
		t.Fatal("the release did not hand the lock to the waiter")
	}
	if n := r.Client.Exists(ctx, k.lock).Val(); n != 1 {
		t.Fatal("the handed lock is not in Redis")
	}
	l.hub.leave(k.channel, q, w, false)
	if n := r.Client.Exists(ctx, k.lock).Val(); n != 0 {
		t.Fatal("the waiter left and its handed lock is still held")
	}
	if v := r.Client.Get(ctx, k.fence).Val(); v != "2" {
		t.Fatalf("fence: got %s, want 2", v)
	}
}

// TestHandOffRacingCancellation: the waiter's context ends while the hand-off is in flight.
// Whichever side wins, Acquire reports the cancellation and the lock is not left held.
func TestHandOffRacingCancellation(t *testing.T) {
	r := redistest.New(t)
	l, log := lockerWithLog(t, r)
	k := resourceKeys(r.Prefix, "res")
	held := hold(t, l)
	wctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	log.mu.Lock()
	log.after = func(name string) {
		if name == "handoff" {
			cancel()
		}
	}
	log.mu.Unlock()
	got := acquireInBackground(wctx, l, "res")
	waitQueued(t, l, "res", 1)
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	res := receive(t, got, 5*time.Second)
	if !errors.Is(res.err, ErrNotAcquired) || !errors.Is(res.err, context.Canceled) {
		t.Fatalf("Acquire: got %v, %v; want ErrNotAcquired and context.Canceled", res.lock, res.err)
	}
	if n := r.Client.Exists(t.Context(), k.lock).Val(); n != 0 {
		t.Fatal("the lock handed to a cancelled waiter is still held")
	}
}

func TestParseHandOff(t *testing.T) {
	tests := []struct {
		reply   any
		granted bool
		token   int64
		n       int64
		bad     bool
	}{
		{reply: int64(0)},
		{reply: []any{int64(1), int64(0)}, n: 1},
		{reply: []any{int64(1), int64(3)}, n: 4},
		{reply: []any{int64(2), "9223372036854775807"}, granted: true, token: 9223372036854775807},
		{reply: []any{int64(2), "0"}, bad: true},
		{reply: []any{int64(2), "x"}, bad: true},
		{reply: []any{int64(3), int64(1)}, bad: true},
		{reply: []any{int64(1)}, bad: true},
		{reply: "OK", bad: true},
		{reply: nil, bad: true},
	}
	for _, tt := range tests {
		granted, token, n, err := parseHandOff(tt.reply)
		if (err != nil) != tt.bad || granted != tt.granted || token != tt.token || n != tt.n {
			t.Errorf("parseHandOff(%#v) = %v, %d, %d, %v", tt.reply, granted, token, n, err)
		}
	}
}

// TestNoHandOffOnClusterOrRing: PUBSUB NUMSUB on a Cluster node counts that node's
// subscribers only, so it cannot tell whether other Lockers wait; a Ring has no waking at all.
func TestNoHandOffOnClusterOrRing(t *testing.T) {
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cluster.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer single.Close()
	for _, tt := range []struct {
		name   string
		client redis.UniversalClient
		want   bool
	}{{"cluster", cluster, false}, {"ring", ring, false}, {"client", single, true}} {
		l := New(tt.client)
		if got := l.hub.handOff.Load(); got != tt.want {
			t.Errorf("%s: hand-off enabled %v, want %v", tt.name, got, tt.want)
		}
		_ = l.Close()
	}
}

// TestRefusedHandOffFallsBack: when Redis answers the hand-off script with an error, Release
// still releases and the waiter is still woken. A refusal that will last (an ACL that denies
// PUBSUB) turns hand-offs off for the Locker; a passing one (BUSY) does not.
func TestRefusedHandOffFallsBack(t *testing.T) {
	for _, tt := range []struct {
		reply string
		sent  int // hand-off scripts sent over two releases
	}{
		{"NOPERM User fk has no permissions to run the 'pubsub|numsub' command", 1},
		{"BUSY Redis is busy running a script.", 2},
	} {
		t.Run(strings.Fields(tt.reply)[0], func(t *testing.T) {
			r := redistest.New(t)
			ctx := t.Context()
			l, log := lockerWithLog(t, r)
			log.mu.Lock()
			log.refuse = tt.reply
			log.mu.Unlock()
			for round := range 2 {
				held := hold(t, l)
				got := acquireInBackground(ctx, l, "res")
				waitQueued(t, l, "res", 1)
				if err := held.Release(ctx); err != nil {
					t.Fatalf("round %d: Release: %v", round, err)
				}
				res := receive(t, got, 2*time.Second) // woken directly, well before the 5s back-off
				if res.err != nil {
					t.Fatalf("round %d: Acquire: %v", round, res.err)
				}
				if err := res.lock.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if n := log.count("refused"); n != tt.sent {
				t.Errorf("hand-off script sent %d times, want %d", n, tt.sent)
			}
		})
	}
}

// TestHandOffUnderACLWithoutPubSub runs on a real Redis as a user that may not run PUBSUB.
func TestHandOffUnderACLWithoutPubSub(t *testing.T) {
	if !redistest.Real() {
		t.Skip("ACL users need a real Redis (FENCING_REDIS_ADDR)")
	}
	r := redistest.New(t)
	ctx := t.Context()
	user := "fktest-" + strings.TrimSuffix(strings.ReplaceAll(r.Prefix, ":", "-"), "-")
	if err := r.Client.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-pubsub").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() { r.Client.Do(context.Background(), "ACL", "DELUSER", user) })
	opts := r.Options()
	opts.Username, opts.Password = user, "pw"
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	l := New(c, WithPrefix(r.Prefix), WithRetryBackoff(5*time.Second, 10*time.Second))
	t.Cleanup(func() { _ = l.Close() })

	held := hold(t, l)
	got := acquireInBackground(ctx, l, "res")
	waitQueued(t, l, "res", 1)
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	res := receive(t, got, 2*time.Second)
	if res.err != nil {
		t.Fatalf("Acquire: %v", res.err)
	}
	if res.lock.Token() != held.Token()+1 {
		t.Fatalf("got token %d, want %d", res.lock.Token(), held.Token()+1)
	}
	if l.hub.handOff.Load() {
		t.Error("hand-offs still on after Redis refused PUBSUB")
	}
	if err := res.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestNeverAllowed(t *testing.T) {
	for msg, want := range map[string]bool{
		"ERR The user executing the script can't run this command or subcommand script: 75…, on @user_script:1.": true,
		"NOPERM User fk has no permissions to run the 'pubsub|numsub' command script: 75…":                       true,
		"ERR unknown command 'pubsub', with args beginning with: script: 75…":                                    true,
		"ERR unknown subcommand 'numsub'. Try PUBSUB HELP.":                                                      true,
		"BUSY Redis is busy running a script.":                                                                   false,
		"LOADING Redis is loading the dataset in memory":                                                         false,
		"READONLY You can't write against a read only replica.":                                                  false,
	} {
		if got := neverAllowed(msg); got != want {
			t.Errorf("neverAllowed(%q) = %v, want %v", msg, got, want)
		}
	}
}
