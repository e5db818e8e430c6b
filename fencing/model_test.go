package fencing

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/internal/wire"
)

// The model test runs random sequences of every verb of every kind of acquisition by two
// Lockers (each with a client of its own) on three resources: TryAcquire and Acquire,
// exclusive, Shared and WithLimit(2 or 3) (a limit other than the live holders' is an
// error); an Acquire that queues, is granted by a release, by a lease that runs out or by a
// waiter leaving, and may be cancelled; TryAcquireAll and AcquireAll; Release, Extend and
// TTL of locks and sets. Any script call may lose its reply on the wire: the server ran it,
// and then the client either sees a network error or sends it again (go-redis's retry).
// Time passes (expiry), scripts are flushed, and with the time floor every key is lost.
//
// A model of the protocol says what each call returns and what Redis holds after it; after
// every step the test compares Redis (read with Locker.Inspect) with it:
//   - the holders (token, owner, lease left) and their kind: never an exclusive holder beside
//     another, never more than n holders of a limit n;
//   - the queue, waiter by waiter, in order, and grants in that order (first come, first
//     served; a grant's token is above the tokens of the grants before it);
//   - tokens strictly increase per resource, also across the loss of every key with the
//     time floor;
//   - Release, Extend and TTL answer ErrNotHeld exactly when the model's acquisition does
//     not hold the resource, and a lost reply changes nothing of what they report.
//
// It runs on miniredis (go test ./...) with the model's own clock, and on the Redis named by
// FENCING_REDIS_ADDR with the wall clock, a margin around each lease's end, and fewer checks
// (see modelChecks). A failure prints the seed and the shrunk sequence of steps.

// modelResources are the resources, one of them needing the encoded layout; modelKinds the
// kinds each may be taken with (the mix on "a" is exclusive and shared, the limits on "b"
// differ now and then, which is an error while holders live).
var (
	modelResources = []string{"a", "b", "{c}"}
	modelKinds     = map[string][]kindM{
		"a":   {{limit: 1}, {limit: 1}, {shared: true}, {shared: true}},
		"b":   {{limit: 3}, {limit: 3}, {limit: 3}, {limit: 2}},
		"{c}": {{limit: 1}, {limit: 1}, {limit: 1}, {shared: true}},
	}
)

// kindM is a kind of acquisition: shared, or a limit (1: exclusive).
type kindM struct {
	shared bool
	limit  int
}

func (k kindM) exclusive() bool { return !k.shared && k.limit == 1 }

func (k kindM) opts() []CallOption {
	switch {
	case k.shared:
		return []CallOption{Shared()}
	case k.limit > 1:
		return []CallOption{WithLimit(k.limit)}
	}
	return nil
}

func (k kindM) String() string {
	switch {
	case k.shared:
		return "shared"
	case k.limit > 1:
		return "limit " + strconv.Itoa(k.limit)
	}
	return "exclusive"
}

// handleM is one acquisition the test holds: a Lock, or a LockSet (an exclusive lock on
// each of its resources).
type handleM struct {
	name     string
	lock     *Lock
	set      *LockSet
	kind     kindM
	ttl      time.Duration
	released bool // a Release returned nil: later calls answer ErrNotHeld locally
}

// holderM is one holder in the model.
type holderM struct {
	h       *handleM
	token   int64
	expires time.Duration
}

// waiterM is a call waiting in a resource's queue: an Acquire, or the AcquireAll that waits
// for that resource.
type waiterM struct {
	name   string
	locker int
	res    string
	kind   kindM
	ttl    time.Duration
	cancel context.CancelFunc
	out    chan callOut
	set    *setM // the AcquireAll it belongs to, or nil
}

// callOut is what a waiting call returned.
type callOut struct {
	lock *Lock
	set  *LockSet
	err  error
}

// setM is an AcquireAll in progress: it holds its resources before next, and waits for or
// is about to take res[next].
type setM struct {
	name   string
	locker int
	res    []string
	ttl    time.Duration
	h      *handleM // the holder of its resources, a LockSet once it returns
	next   int
	cancel context.CancelFunc
	out    chan callOut
}

// resM is one resource in the model.
type resM struct {
	holders []holderM
	kind    kindM // the holders' kind, when there are holders
	queue   []*waiterM
	last    int64 // the highest token seen
}

type model struct {
	t       *rapid.T
	ctx     context.Context
	redis   *redistest.Redis
	client  *redis.Client // unhooked, for the test's own reads
	clock   *modelClock
	lockers [2]*Locker
	clients [2]*redis.Client // the Lockers', each with its dropper
	drop    [2]*dropper
	prefix  string
	floor   bool

	res     map[string]*resM
	handles []*handleM
	waiters []*waiterM // every Acquire still waiting
	sets    []*setM    // every AcquireAll still waiting
	n       int        // names the handles and waiters
	log     []string   // what the model did, for a failure's message
}

// modelChecks is how many sequences a run tries: rapid's default (-rapid.checks, 100) on
// miniredis, and 8 on a real Redis, where time passes for real, unless -rapid.checks was
// given.
func modelChecks() {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set && redistest.Real() {
		_ = flag.Set("rapid.checks", "8")
	}
}

func TestModel(t *testing.T) {
	t.Parallel()
	modelChecks()
	rapid.Check(t, func(rt *rapid.T) {
		m := newModel(rt)
		defer m.close()
		rt.Repeat(map[string]func(*rapid.T){
			"tryAcquire":    m.tryAcquire,
			"acquire":       m.acquire,
			"tryAcquireAll": m.tryAcquireAll,
			"acquireAll":    m.acquireAll,
			"release":       m.release,
			"extend":        m.extend,
			"ttl":           m.ttl,
			"cancel":        m.cancelWaiter,
			"advance":       m.advance,
			"scriptFlush":   m.scriptFlush,
			"lose":          m.loseEverything,
			"":              m.check,
		})
	})
}

func newModel(rt *rapid.T) *model {
	m := &model{t: rt, ctx: context.Background(), floor: rapid.Bool().Draw(rt, "time_floor"), res: map[string]*resM{}}
	// Each sequence gets a Redis of its own: a fresh miniredis, or a fresh prefix on the
	// real one; close frees it.
	m.redis = &redistest.Redis{Prefix: fmt.Sprintf("fktest:model:%d:%d:", time.Now().UnixNano(), modelSeq.Add(1))}
	m.clock = &modelClock{start: time.Now(), tol: 300 * time.Millisecond}
	if redistest.Real() {
		m.redis.Addr, m.redis.DB = os.Getenv(redistest.EnvAddr), 9
	} else {
		mini := miniredis.NewMiniRedis()
		if err := mini.Start(); err != nil {
			rt.Fatalf("miniredis: %v", err)
		}
		m.redis.Mini, m.redis.Addr = mini, mini.Addr()
		m.clock.mini, m.clock.base, m.clock.tol = mini, time.Now().Truncate(time.Second), 0
		mini.SetTime(m.clock.base)
	}
	m.prefix = m.redis.Prefix
	m.client = redis.NewClient(m.redis.Options())
	opts := []Option{WithPrefix(m.prefix), WithRetryBackoff(20*time.Millisecond, time.Second)}
	if m.floor {
		opts = append(opts, WithServerTimeFloor())
	}
	for i := range m.lockers {
		m.clients[i] = redis.NewClient(m.redis.Options())
		m.drop[i] = &dropper{}
		m.clients[i].AddHook(m.drop[i])
		m.lockers[i] = New(m.clients[i], opts...)
	}
	for _, name := range modelResources {
		m.res[name] = &resM{}
	}
	return m
}

// modelSeq numbers the model's sequences, for their key prefixes.
var modelSeq atomic.Int64

// close ends every call still waiting and waits for it, and frees the Redis.
func (m *model) close() {
	// A call whose outcome a failed step took already is not waited for long.
	for _, w := range m.waiters {
		w.cancel()
		select {
		case <-w.out:
		case <-time.After(5 * time.Second):
		}
	}
	for _, s := range m.sets {
		s.cancel()
		select {
		case <-s.out:
		case <-time.After(5 * time.Second):
		}
	}
	for i, l := range m.lockers {
		_ = l.Close()
		_ = m.clients[i].Close()
	}
	if m.redis.Mini != nil {
		m.redis.Mini.Close()
	} else {
		ctx := context.Background()
		var keys []string
		iter := m.client.Scan(ctx, 0, m.prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			_ = m.client.Del(ctx, keys...).Err()
		}
	}
	_ = m.client.Close()
}

func (m *model) fatalf(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf(format+"\nthe model's last events:\n%s", append(args, strings.Join(m.log[max(len(m.log)-40, 0):], "\n"))...)
}

// logf records an event of the model, which a failure prints.
func (m *model) logf(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf("  %s", fmt.Sprintf(format, args...)))
}

// ---- the model's rules ----

// expire drops the holders of r whose lease has ended.
func (m *model) expire(r *resM) {
	now := m.clock.now()
	r.holders = slices.DeleteFunc(r.holders, func(h holderM) bool { return h.expires <= now })
}

// admits reports whether r admits an acquisition of kind k now.
func admits(r *resM, k kindM) bool {
	switch {
	case len(r.holders) == 0:
		return true
	case r.kind.exclusive() || r.kind != k:
		return false
	case k.shared:
		return true
	}
	return len(r.holders) < k.limit
}

// mismatch reports whether an acquisition of kind k can never join r's holders, not even by
// waiting: exclusive and shared wait for each other; a limit mixes with nothing else.
func mismatch(r *resM, k kindM) bool {
	if len(r.holders) == 0 || r.kind == k {
		return false
	}
	rw := func(k kindM) bool { return k.shared || k.exclusive() }
	return !(rw(k) && rw(r.kind))
}

// fill grants r to the waiters at the head of its queue while they fit, in order, and
// returns them: each becomes a holder whose token the test learns when its call returns.
func (m *model) fill(r *resM) []*waiterM {
	var granted []*waiterM
	for len(r.queue) > 0 && admits(r, r.queue[0].kind) {
		w := r.queue[0]
		r.queue = r.queue[1:]
		h := &handleM{name: w.name, kind: w.kind, ttl: w.ttl}
		if w.set != nil {
			h = w.set.h
		}
		lease := min(w.ttl, grantLease)
		if len(r.holders) == 0 {
			r.kind = w.kind
		}
		r.holders = append(r.holders, holderM{h: h, expires: m.clock.now() + lease})
		granted = append(granted, w)
		m.logf("grant %s to %s (L%d, %v)", w.res, w.name, w.locker, w.kind)
	}
	return granted
}

// holds reports whether h holds r in the model, and its index.
func holds(r *resM, h *handleM) (int, bool) {
	i := slices.IndexFunc(r.holders, func(x holderM) bool { return x.h == h })
	return i, i >= 0
}

// leaseLeft is how long until r can change hands: the exclusive holder's lease, the latest of
// shared holders', the earliest of a limit's.
func (m *model) leaseLeft(r *resM) time.Duration {
	var pick time.Duration
	for i, h := range r.holders {
		e := h.expires
		if i == 0 || (r.kind.shared && e > pick) || (!r.kind.shared && e < pick) {
			pick = e
		}
	}
	return pick - m.clock.now()
}

// seen records a token newly issued for r: it must be above every token before it.
func (m *model) seen(res string, token int64) {
	r := m.res[res]
	if token <= r.last {
		m.fatalf("%s: token %d issued after %d", res, token, r.last)
	}
	r.last = token
}

// ---- steps ----

func (m *model) pickLocker() int { return rapid.IntRange(0, 1).Draw(m.t, "locker") }

func (m *model) pickRes() string { return rapid.SampledFrom(modelResources).Draw(m.t, "resource") }

func (m *model) pickKind(res string) kindM {
	return rapid.SampledFrom(modelKinds[res]).Draw(m.t, "kind")
}

// pickTTL returns a lease: seconds of real time on miniredis, so that the local check of a
// reply's lateness never fires; on a real Redis, seconds too, as time passes for real.
func (m *model) pickTTL(short bool) time.Duration {
	hi := 60000
	if short || m.clock.mini == nil {
		hi = 4000
	}
	return time.Duration(rapid.IntRange(1500, hi).Draw(m.t, "ttl_ms")) * time.Millisecond
}

// lose arms the dropper of locker for the call of s on res's lock key after skip others, or
// not; it returns a function that disarms it and reports whether a reply was lost.
func (m *model) lose(locker int, verb, res string, skip int) func() bool {
	how := rapid.SampledFrom([]string{"", "", "", "lost", "retried"}).Draw(m.t, "reply")
	d := m.drop[locker]
	if how == "" {
		return func() bool { return false }
	}
	match := scriptCmd(verb, wire.For(m.prefix, res).Lock)
	d.arm(func(c redis.Cmder) bool {
		if !match(c) {
			return false
		}
		skip--
		return skip < 0
	}, how == "retried")
	return d.disarm
}

// settleTime, on a real Redis, waits until no lease ends within the margin of now, and then
// settles what ran out.
func (m *model) settleTime() {
	if m.clock.mini != nil {
		return
	}
	for {
		now, wait := m.clock.now(), time.Duration(0)
		for _, r := range m.res {
			for _, h := range r.holders {
				if d := h.expires + m.clock.tol - now; d > 0 && h.expires-m.clock.tol < now {
					wait = max(wait, d)
				}
			}
		}
		if wait == 0 {
			break
		}
		time.Sleep(wait)
	}
	m.settle()
}

// settle brings about what the protocol does without a call of the test: a resource whose
// holders are gone goes to the head of its queue at the front waiter's next poll, made now.
// It waits for the calls granted.
func (m *model) settle() {
	var granted []*waiterM
	for _, name := range modelResources {
		r := m.res[name]
		m.expire(r)
		granted = append(granted, m.fill(r)...)
	}
	if len(granted) == 0 {
		return
	}
	for _, l := range m.lockers {
		if err := pollNow(m.ctx, l); err != nil {
			m.fatalf("poll: %v", err)
		}
	}
	m.granted(granted)
}

// netErr reports whether err is what a call returns when the reply of its script was lost
// and not sent again: neither an answer of the protocol nor a Redis error reply.
func netErr(err error) bool {
	return errors.Is(err, errReplyLost) && !errors.Is(err, ErrNotAcquired) && !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrNotHeld)
}

func (m *model) tryAcquire(t *rapid.T) {
	m.settleTime()
	li, res := m.pickLocker(), m.pickRes()
	k, ttl := m.pickKind(res), m.pickTTL(false)
	r := m.res[res]
	lost := m.lose(li, "acquire", res, 0)
	lock, err := m.lockers[li].TryAcquire(m.ctx, res, append(k.opts(), WithTTL(ttl))...)
	dropped := lost()
	m.expire(r)
	if mismatch(r, k) {
		if !errors.Is(err, ErrInvalid) && !(dropped && netErr(err)) {
			m.fatalf("TryAcquire(%s, %v) beside %v holders: got %v, want ErrInvalid", res, k, r.kind, err)
		}
		return
	}
	m.granted(m.fill(r))
	switch {
	case dropped && netErr(err):
		// The reply was lost and not sent again: whatever the script took was freed again;
		// only its token is gone.
		if lock != nil {
			m.fatalf("TryAcquire(%s) with its reply lost: got a lock and %v", res, err)
		}
	case len(r.queue) > 0 || !admits(r, k):
		if !errors.Is(err, ErrNotAcquired) || lock != nil {
			m.fatalf("TryAcquire(%s, %v) busy: got %v, %v; want ErrNotAcquired", res, k, lock, err)
		}
		if left := m.leaseLeft(r); len(r.holders) > 0 && (m.clock.mini != nil || left > m.clock.tol) {
			m.retryAfter(res, err, r, left)
		}
	case err != nil:
		m.fatalf("TryAcquire(%s, %v) on a resource that admits it: %v", res, k, err)
	default:
		m.took(res, lock, k, ttl, m.clock.now())
	}
}

// retryAfter checks the RetryAfter of a busy error on r, whose holders' lease has left: the
// exclusive holder's remaining lease; for shared holders, at least the latest of theirs (the
// scripts keep an upper bound of their ends, which a release does not move back); for a
// limit's, at most the earliest of theirs and more than 0 (a lower bound).
func (m *model) retryAfter(res string, err error, r *resM, left time.Duration) {
	d, _ := RetryAfter(err)
	tol := m.clock.tol
	switch {
	case r.kind.exclusive() && absDur(d-left) > tol,
		r.kind.shared && d < left-tol,
		!r.kind.exclusive() && !r.kind.shared && (d > left+tol || d <= 0):
		m.fatalf("TryAcquire(%s) busy beside %v holders: RetryAfter %v, the holders' lease %v", res, r.kind, d, left)
	}
}

// took records lock, taken on res with kind k and ttl at model time at.
func (m *model) took(res string, lock *Lock, k kindM, ttl time.Duration, at time.Duration) {
	m.seen(res, lock.Token())
	m.n++
	h := &handleM{name: fmt.Sprintf("h%d", m.n), lock: lock, kind: k, ttl: ttl}
	m.handles = append(m.handles, h)
	r := m.res[res]
	if len(r.holders) == 0 {
		r.kind = k
	}
	r.holders = append(r.holders, holderM{h: h, token: lock.Token(), expires: at + ttl})
	m.logf("%s takes %s (%v) with token %d", h.name, res, k, lock.Token())
}

func (m *model) acquire(t *rapid.T) {
	m.settleTime()
	li, res := m.pickLocker(), m.pickRes()
	k, ttl := m.pickKind(res), m.pickTTL(true)
	r := m.res[res]
	m.expire(r)
	if m.setWaits(li, res) {
		t.Skip("a set of this Locker waits here")
	}
	l := m.lockers[li]
	// The call's first script is a single attempt, unless the Locker waits on the resource
	// already; the second (or first) joins the queue. Either may lose its reply.
	lost := m.lose(li, "acquire", res, rapid.IntRange(0, 1).Draw(t, "which"))
	ctx, cancel := context.WithTimeout(m.ctx, time.Minute)
	m.n++
	w := &waiterM{name: fmt.Sprintf("w%d", m.n), locker: li, res: res, kind: k, ttl: ttl, cancel: cancel, out: make(chan callOut, 1)}
	before := queuedOn(l, res)
	go func() {
		lock, err := l.Acquire(ctx, res, append(k.opts(), WithTTL(ttl))...)
		w.out <- callOut{lock: lock, err: err}
	}()
	if mismatch(r, k) {
		out := <-w.out
		cancel()
		if dropped := lost(); !errors.Is(out.err, ErrInvalid) && !(dropped && netErr(out.err)) {
			m.fatalf("Acquire(%s, %v) beside %v holders: got %v, want ErrInvalid", res, k, r.kind, out.err)
		}
		return
	}
	m.granted(m.fill(r))
	if len(r.queue) == 0 && admits(r, k) {
		out := <-w.out
		cancel()
		switch dropped := lost(); {
		case dropped && netErr(out.err):
			if out.lock != nil {
				m.fatalf("Acquire(%s) with its reply lost: got a lock and %v", res, out.err)
			}
		case out.err != nil:
			m.fatalf("Acquire(%s, %v) on a resource that admits it: %v", res, k, out.err)
		default:
			m.took(res, out.lock, k, ttl, m.clock.now())
		}
		return
	}
	// The call queues: wait until its element is in the queue, or it returned.
	out, returned := m.waitFor(func() bool { return queuedOn(l, res) > before }, w.out)
	dropped := lost()
	if returned {
		cancel()
		if dropped && netErr(out.err) {
			// Its reply lost and not sent again: the call failed and left the queue.
			if n := queuedOn(l, res); n != before {
				m.fatalf("Acquire(%s) failed with its reply lost, and left %d waiters queued, not %d", res, n, before)
			}
			return
		}
		m.fatalf("Acquire(%s, %v) on a busy resource returned %v, %v; want it to wait", res, k, out.lock, out.err)
	}
	r.queue = append(r.queue, w)
	m.waiters = append(m.waiters, w)
	m.logf("%s (L%d, %v) queues for %s", w.name, li, k, res)
}

// setWaits reports whether a set of locker li waits for res or will.
func (m *model) setWaits(li int, res string) bool {
	for _, s := range m.sets {
		if s.locker == li && slices.Contains(s.res[s.next:], res) {
			return true
		}
	}
	return false
}

// waitFor waits until cond holds or the call whose outcome out carries returns, checking
// every millisecond; the test fails when neither happens within 10 s.
func (m *model) waitFor(cond func() bool, out chan callOut) (callOut, bool) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case o := <-out:
			return o, true
		default:
		}
		if cond() {
			return callOut{}, false
		}
		if time.Now().After(deadline) {
			m.fatalf("timed out waiting for the protocol to settle")
		}
		time.Sleep(time.Millisecond)
	}
}

// granted waits for the calls the model granted, in the order granted, and checks that each
// got the resource with a token above the grants before it.
func (m *model) granted(ws []*waiterM) {
	for _, w := range ws {
		if w.set != nil {
			m.setGranted(w)
			continue
		}
		var out callOut
		select {
		case out = <-w.out:
		case <-time.After(10 * time.Second):
			m.fatalf("%s: no grant of %s within 10s", w.name, w.res)
		}
		w.cancel()
		m.waiters = slices.DeleteFunc(m.waiters, func(x *waiterM) bool { return x == w })
		if out.err != nil {
			m.fatalf("%s: Acquire(%s) granted by the model returned %v", w.name, w.res, out.err)
		}
		r := m.res[w.res]
		i := slices.IndexFunc(r.holders, func(h holderM) bool { return h.h.name == w.name && h.h.lock == nil })
		if i < 0 {
			m.fatalf("%s: granted %s, but the model has no holder for it", w.name, w.res)
		}
		m.seen(w.res, out.lock.Token())
		h := r.holders[i].h
		h.lock = out.lock
		r.holders[i].token = out.lock.Token()
		m.handles = append(m.handles, h)
		ran, err := settleLock(m.ctx, out.lock)
		left := w.ttl
		if err == nil && !ran && m.clock.mini == nil {
			// On a real Redis a poll may have made the grant before this step, as the lease
			// before it ran out: when, the model learns from Redis.
			left, err = out.lock.TTL(m.ctx)
		}
		switch {
		case m.clock.mini == nil && lapsed(out.lock, err):
			// The grant's lease ran out before this step too (a step that slept past it, an
			// advance's or a settle's, or a slow machine), and not before the lock's own
			// deadline said it could: it is gone, as a holder that did not renew.
			m.logf("%s: the grant's lease ran out before this step", w.name)
			r.holders[i].expires = m.clock.now()
		case err != nil:
			m.fatalf("%s: the grant's lease (its deferred extension ran: %v): %v", w.name, ran, err)
		case ran || m.clock.mini == nil:
			r.holders[i].expires = m.clock.now() + left
		}
	}
}

func (m *model) release(t *rapid.T) {
	m.settleTime()
	h := m.pickHandle()
	if h == nil {
		t.Skip("no acquisition yet")
	}
	li := m.lockerOf(h)
	names := m.members(h)
	lost := m.lose(li, "release", names[0], 0)
	var err error
	if h.set != nil {
		err = h.set.Release(m.ctx)
	} else {
		err = h.lock.Release(m.ctx)
	}
	lost()
	var grants []*waiterM
	held := 0
	for _, res := range names {
		r := m.res[res]
		m.expire(r)
		if i, ok := holds(r, h); ok {
			r.holders = slices.Delete(r.holders, i, i+1)
			held++
			m.logf("%s releases %s", h.name, res)
		}
		grants = append(grants, m.fill(r)...)
	}
	switch {
	case held == len(names) && err != nil:
		m.fatalf("Release of %s, which holds %v: %v", h.name, names, err)
	case held < len(names) && !errors.Is(err, ErrNotHeld):
		m.fatalf("Release of %s, which holds %d of %v: got %v, want ErrNotHeld", h.name, held, names, err)
	}
	if held == len(names) {
		h.released = true
	}
	m.granted(grants)
}

func (m *model) extend(t *rapid.T) {
	m.settleTime()
	h := m.pickHandle()
	if h == nil {
		t.Skip("no acquisition yet")
	}
	ttl := m.pickTTL(false)
	names := m.members(h)
	lost := m.lose(m.lockerOf(h), "extend", names[0], 0)
	var err error
	if h.set != nil {
		err = h.set.Extend(m.ctx, ttl)
	} else {
		err = h.lock.Extend(m.ctx, ttl)
	}
	dropped := lost()
	held := 0
	for _, res := range names {
		r := m.res[res]
		m.expire(r)
		if i, ok := holds(r, h); ok {
			r.holders[i].expires = m.clock.now() + ttl
			held++
		}
	}
	switch {
	case dropped && netErr(err):
		// The reply was lost and not sent again: the call failed, the server extended.
	case held == len(names) && err != nil:
		m.fatalf("Extend of %s, which holds %v: %v", h.name, names, err)
	case held < len(names) && !errors.Is(err, ErrNotHeld):
		m.fatalf("Extend of %s, which holds %d of %v: got %v, want ErrNotHeld", h.name, held, names, err)
	}
}

func (m *model) ttl(t *rapid.T) {
	m.settleTime()
	h := m.pickHandle()
	if h == nil || h.set != nil {
		t.Skip("no single lock")
	}
	res := m.members(h)[0]
	lost := m.lose(m.lockerOf(h), "extend", res, 0)
	got, err := h.lock.TTL(m.ctx)
	dropped := lost()
	r := m.res[res]
	m.expire(r)
	i, ok := holds(r, h)
	switch {
	case dropped && netErr(err):
	case !ok && !errors.Is(err, ErrNotHeld):
		m.fatalf("TTL of %s, which does not hold %s: got %v, %v; want ErrNotHeld", h.name, res, got, err)
	case ok && err != nil:
		m.fatalf("TTL of %s, which holds %s: %v", h.name, res, err)
	case ok && m.clock.mini != nil && got != r.holders[i].expires-m.clock.now():
		m.fatalf("TTL of %s: got %v, want %v", h.name, got, r.holders[i].expires-m.clock.now())
	}
}

func (m *model) tryAcquireAll(t *rapid.T) {
	m.settleTime()
	li := m.pickLocker()
	names := rapid.SliceOfNDistinct(rapid.SampledFrom(modelResources), 1, 3, rapid.ID[string]).Draw(t, "resources")
	slices.Sort(names)
	ttl := m.pickTTL(false)
	s := "acquireall"
	if len(names) == 1 {
		s = "acquire"
	}
	lost := m.lose(li, s, names[0], 0)
	set, err := m.lockers[li].TryAcquireAll(m.ctx, names, WithTTL(ttl))
	dropped := lost()
	busy, refused := "", false
	for _, res := range names {
		r := m.res[res]
		m.expire(r)
		if busy == "" && (len(r.holders) > 0 || len(r.queue) > 0) {
			busy, refused = res, mismatch(r, kindM{limit: 1})
		}
	}
	switch {
	case dropped && netErr(err):
		if set != nil {
			m.fatalf("TryAcquireAll(%v) with its reply lost: got a set and %v", names, err)
		}
	case refused:
		if !errors.Is(err, ErrInvalid) {
			m.fatalf("TryAcquireAll(%v), %s held with a limit: got %v, %v; want ErrInvalid", names, busy, set, err)
		}
	case busy != "":
		if b := (*BusyError)(nil); !errors.Is(err, ErrNotAcquired) || !errors.As(err, &b) || b.Resource != busy {
			m.fatalf("TryAcquireAll(%v), %s busy: got %v, %v", names, busy, set, err)
		}
	case err != nil:
		m.fatalf("TryAcquireAll(%v) of free resources: %v", names, err)
	default:
		m.tookSet(set, names, ttl, m.clock.now())
	}
}

// tookSet records set, taken on names with ttl, its locks from model time at.
func (m *model) tookSet(set *LockSet, names []string, ttl time.Duration, at time.Duration) *handleM {
	m.n++
	h := &handleM{name: fmt.Sprintf("s%d", m.n), set: set, kind: kindM{limit: 1}, ttl: ttl}
	m.handles = append(m.handles, h)
	for _, res := range names {
		m.seen(res, set.Token(res))
		r := m.res[res]
		r.kind = kindM{limit: 1}
		r.holders = append(r.holders, holderM{h: h, token: set.Token(res), expires: at + ttl})
	}
	return h
}

func (m *model) acquireAll(t *rapid.T) {
	m.settleTime()
	li := m.pickLocker()
	names := rapid.SliceOfNDistinct(rapid.SampledFrom(modelResources), 2, 3, rapid.ID[string]).Draw(t, "resources")
	slices.Sort(names)
	if len(m.sets) > 0 {
		// Two sets granted in one step would go on at once, in an order nobody decides.
		t.Skip("a set waits already")
	}
	for _, res := range names {
		if queuedOn(m.lockers[li], res) > 0 {
			t.Skip("this Locker waits for one of the resources already")
		}
	}
	if m.clock.mini == nil {
		// On a real Redis a lease that runs out grants the set its resource at once, and it
		// goes on to the next while the model still waits for the lease's margin: a set
		// that waits is left to miniredis's run.
		for _, res := range names {
			r := m.res[res]
			m.expire(r)
			if len(r.holders) > 0 || len(r.queue) > 0 {
				t.Skip("a set that would wait, on a real Redis")
			}
		}
	}
	ttl := m.pickTTL(true)
	ctx, cancel := context.WithCancel(m.ctx)
	m.n++
	s := &setM{name: fmt.Sprintf("s%d", m.n), locker: li, res: names, ttl: ttl, cancel: cancel, out: make(chan callOut, 1)}
	s.h = &handleM{name: s.name, kind: kindM{limit: 1}, ttl: ttl}
	go func() {
		set, err := m.lockers[li].AcquireAll(ctx, names, WithTTL(ttl))
		s.out <- callOut{set: set, err: err}
	}()
	// The free resources at the head of the order are taken in one script.
	for s.next < len(names) {
		r := m.res[names[s.next]]
		m.expire(r)
		if mismatch(r, kindM{limit: 1}) {
			m.refuse(s)
			return
		}
		if len(r.holders) > 0 || len(r.queue) > 0 {
			break
		}
		r.kind = kindM{limit: 1}
		r.holders = append(r.holders, holderM{h: s.h, expires: m.clock.now() + ttl})
		s.next++
		m.logf("set %s (L%d) takes %s in its first script", s.name, li, names[s.next-1])
	}
	m.sets = append(m.sets, s)
	m.proceed(s)
}

// proceed follows set s from res[next]: each resource is tried on its own and waited for
// in its queue when busy. It returns once s waits for a resource, or has returned.
func (m *model) proceed(s *setM) {
	for s.next < len(s.res) {
		res := s.res[s.next]
		r := m.res[res]
		m.expire(r)
		if mismatch(r, kindM{limit: 1}) {
			m.refuse(s)
			return
		}
		grants := m.fill(r)
		if len(r.queue) == 0 && admits(r, kindM{limit: 1}) {
			r.kind = kindM{limit: 1}
			r.holders = append(r.holders, holderM{h: s.h, expires: m.clock.now() + s.ttl})
			s.next++
			m.logf("set %s (L%d) takes %s", s.name, s.locker, res)
			m.granted(grants)
			continue
		}
		w := &waiterM{name: s.name, locker: s.locker, res: res, kind: kindM{limit: 1}, ttl: s.ttl, cancel: s.cancel, out: s.out, set: s}
		l := m.lockers[s.locker]
		if out, returned := m.waitFor(func() bool { return queuedOn(l, res) > 0 }, s.out); returned {
			m.fatalf("AcquireAll %s returned %v, %v; want it to wait for %s (holders %s, queue %d)", s.name, out.set, out.err, res, m.modelText(r.holders), len(r.queue))
		}
		r.queue = append(r.queue, w)
		m.logf("set %s (L%d) queues for %s", s.name, s.locker, res)
		m.granted(grants)
		return
	}
	var out callOut
	select {
	case out = <-s.out:
	case <-time.After(10 * time.Second):
		m.fatalf("AcquireAll %s: no return within 10s", s.name)
	}
	m.sets = slices.DeleteFunc(m.sets, func(x *setM) bool { return x == s })
	s.cancel()
	if out.err != nil {
		m.fatalf("AcquireAll %s of %v: %v", s.name, s.res, out.err)
	}
	s.h.set = out.set
	m.handles = append(m.handles, s.h)
	for _, k := range out.set.Locks() {
		r := m.res[k.Resource()]
		i, _ := holds(r, s.h)
		m.seen(k.Resource(), k.Token())
		r.holders[i].token = k.Token()
		switch ran, err := settleLock(m.ctx, k); {
		case m.clock.mini == nil && lapsed(k, err):
			m.logf("AcquireAll %s: the lease of %s ran out before this step", s.name, k.Resource())
			r.holders[i].expires = m.clock.now()
		case err != nil:
			m.fatalf("AcquireAll %s: deferred extension: %v", s.name, err)
		case ran:
			r.holders[i].expires = m.clock.now() + s.ttl
		}
	}
}

// refuse ends set s on a resource held with a limit, which it cannot join: the call returns
// an error wrapping ErrInvalid, having freed what it took.
func (m *model) refuse(s *setM) {
	var out callOut
	select {
	case out = <-s.out:
	case <-time.After(10 * time.Second):
		m.fatalf("AcquireAll %s: no return within 10s", s.name)
	}
	s.cancel()
	m.sets = slices.DeleteFunc(m.sets, func(x *setM) bool { return x == s })
	if !errors.Is(out.err, ErrInvalid) {
		m.fatalf("AcquireAll %s of %v, %s held with a limit: got %v, want ErrInvalid", s.name, s.res, s.res[s.next], out.err)
	}
	m.freeSet(s)
}

// freeSet releases what set s took, all in one step as the set's release does, and then
// waits for the grants that makes.
func (m *model) freeSet(s *setM) {
	for _, res := range s.res[:s.next] {
		r := m.res[res]
		if i, ok := holds(r, s.h); ok {
			r.holders = slices.Delete(r.holders, i, i+1)
		}
	}
	var grants []*waiterM
	for _, res := range s.res[:s.next] {
		grants = append(grants, m.fill(m.res[res])...)
	}
	m.granted(grants)
}

// setGranted goes on with the set whose waiter w was granted its resource.
func (m *model) setGranted(w *waiterM) {
	w.set.next++
	m.proceed(w.set)
}

func (m *model) cancelWaiter(t *rapid.T) {
	m.settleTime()
	var all []*waiterM
	for _, name := range modelResources {
		all = append(all, m.res[name].queue...)
	}
	if len(all) == 0 {
		t.Skip("nobody waits")
	}
	w := all[rapid.IntRange(0, len(all)-1).Draw(t, "waiter")]
	m.logf("cancel %s (L%d) waiting for %s", w.name, w.locker, w.res)
	w.cancel()
	out := <-w.out
	if !errors.Is(out.err, ErrNotAcquired) || !errors.Is(out.err, context.Canceled) {
		m.fatalf("%s cancelled while waiting for %s: got %v, want ErrNotAcquired and context.Canceled", w.name, w.res, out.err)
	}
	r := m.res[w.res]
	r.queue = slices.DeleteFunc(r.queue, func(x *waiterM) bool { return x == w })
	if w.set == nil {
		m.waiters = slices.DeleteFunc(m.waiters, func(x *waiterM) bool { return x == w })
	} else {
		// The set frees what it took.
		m.sets = slices.DeleteFunc(m.sets, func(x *setM) bool { return x == w.set })
		m.freeSet(w.set)
	}
	m.settle()
}

func (m *model) advance(t *rapid.T) {
	hi := 70000
	switch {
	case m.clock.mini == nil:
		hi = 1500
	case len(m.sets) > 0:
		t.Skip("a set waits, renewing its leases")
	case len(m.waiters) > 0:
		hi = 2500 // within the waiters' keys' TTL: the polls below renew them
	}
	d := time.Duration(rapid.IntRange(0, hi).Draw(t, "advance_ms")) * time.Millisecond
	m.logf("advance %v", d)
	m.clock.advance(d)
	if m.clock.mini != nil {
		for _, l := range m.lockers {
			aged(l)
			if err := pollNow(m.ctx, l); err != nil {
				m.fatalf("poll: %v", err)
			}
		}
	}
	m.settleTime()
	m.settle()
}

func (m *model) scriptFlush(t *rapid.T) {
	if m.clock.mini == nil {
		t.Skip("SCRIPT FLUSH on a shared Redis slows other tests' calls")
	}
	if err := m.client.ScriptFlush(m.ctx).Err(); err != nil {
		m.fatalf("SCRIPT FLUSH: %v", err)
	}
}

// loseEverything deletes every key of the resources, as a restart without persistence does,
// a second later. Only with the time floor, which must keep tokens increasing through it.
func (m *model) loseEverything(t *rapid.T) {
	if !m.floor || len(m.waiters) > 0 || len(m.sets) > 0 {
		t.Skip("counter loss is modelled only with the time floor, nobody waiting")
	}
	m.clock.advance(time.Second)
	for _, l := range m.lockers {
		aged(l)
	}
	for _, name := range modelResources {
		k := wire.For(m.prefix, name)
		if err := m.client.Del(m.ctx, k.Lock, k.Fence, k.Queue).Err(); err != nil {
			m.fatalf("DEL: %v", err)
		}
		m.res[name].holders = nil // the tokens seen stay in last: the next must be higher
	}
	m.settleTime()
}

// pickHandle returns one of the test's acquisitions, most often one that holds its
// resource in the model, or nil.
func (m *model) pickHandle() *handleM {
	var live []*handleM
	for _, h := range m.handles {
		for _, res := range m.members(h) {
			r := m.res[res]
			m.expire(r)
			if _, ok := holds(r, h); ok {
				live = append(live, h)
				break
			}
		}
	}
	pool := m.handles
	if len(live) > 0 && rapid.IntRange(0, 3).Draw(m.t, "live") > 0 {
		pool = live
	}
	if len(pool) == 0 {
		return nil
	}
	return pool[rapid.IntRange(0, len(pool)-1).Draw(m.t, "handle")]
}

// members returns the resources of h.
func (m *model) members(h *handleM) []string {
	if h.set != nil {
		var names []string
		for _, k := range h.set.Locks() {
			names = append(names, k.Resource())
		}
		return names
	}
	return []string{h.lock.Resource()}
}

// lockerOf returns the index of the Locker of h.
func (m *model) lockerOf(h *handleM) int {
	l := h.lock
	if h.set != nil {
		l = h.set.locks[0]
	}
	if l.locker == m.lockers[1] {
		return 1
	}
	return 0
}

// ---- the comparison ----

// check compares what Redis holds of every resource with the model.
func (m *model) check(t *rapid.T) {
	m.settleTime()
	for _, name := range modelResources {
		st, err := m.lockers[0].Inspect(m.ctx, name)
		if err != nil {
			m.fatalf("Inspect(%s): %v", name, err)
		}
		r := m.res[name]
		m.expire(r)
		m.compare(name, st, r)
	}
}

func (m *model) compare(name string, st *Status, r *resM) {
	m.t.Helper()
	// The invariants, from Redis alone.
	switch {
	case st.Limit == 1 && len(st.Holders) > 1:
		m.fatalf("%s: %d exclusive holders", name, len(st.Holders))
	case st.Limit > 1 && len(st.Holders) > st.Limit:
		m.fatalf("%s: %d holders of a limit %d", name, len(st.Holders), st.Limit)
	}
	// The holders.
	want := slices.Clone(r.holders)
	slices.SortFunc(want, func(a, b holderM) int { return cmp.Compare(a.token, b.token) })
	if len(st.Holders) != len(want) {
		m.fatalf("%s: Redis has holders %s, the model %s", name, holdersText(st.Holders), m.modelText(want))
	}
	if len(want) > 0 {
		if st.Shared != r.kind.shared || (!r.kind.shared && st.Limit != r.kind.limit) {
			m.fatalf("%s: Redis holds it shared=%v limit=%d, the model %v", name, st.Shared, st.Limit, r.kind)
		}
	}
	for i, h := range want {
		got := st.Holders[i]
		if h.token != 0 && got.Token != h.token {
			m.fatalf("%s: Redis has holders %s, the model %s", name, holdersText(st.Holders), m.modelText(want))
		}
		if h.h.lock != nil && h.h.lock.Resource() == name && got.Owner+":"+strconv.FormatInt(got.Token, 10) != h.h.lock.value {
			m.fatalf("%s: holder %d is %s in Redis, %s in the model", name, got.Token, got.Owner, h.h.lock.value)
		}
		if left := h.expires - m.clock.now(); absDur(got.TTL-left) > m.clock.tol {
			m.fatalf("%s: holder %d has %v left in Redis, %v in the model", name, got.Token, got.TTL, left)
		}
	}
	// The queue, in order.
	if len(st.Waiters) != len(r.queue) {
		m.fatalf("%s: Redis queues %d waiters, the model %d\nRedis: %s\nmodel: %s", name, len(st.Waiters), len(r.queue), m.waitersText(st.Waiters), m.queueText(r.queue))
	}
	for i, w := range r.queue {
		got := st.Waiters[i]
		if got.Locker != ID(m.lockers[w.locker]) || got.Shared != w.kind.shared || (!w.kind.shared && got.Limit != w.kind.limit) || !got.Alive {
			m.fatalf("%s: waiter %d in Redis is %+v, in the model %s (%v) of Locker %d\nRedis: %s\nmodel: %s", name, i, got, w.name, w.kind, w.locker, m.waitersText(st.Waiters), m.queueText(r.queue))
		}
	}
	if !m.floor && st.NextToken <= r.last {
		m.fatalf("%s: next token %d after %d", name, st.NextToken, r.last)
	}
}

func (m *model) waitersText(ws []Waiter) string {
	var b strings.Builder
	for _, w := range ws {
		li := 0
		if w.Locker == ID(m.lockers[1]) {
			li = 1
		}
		fmt.Fprintf(&b, "[L%d shared=%v limit=%d alive=%v]", li, w.Shared, w.Limit, w.Alive)
	}
	return b.String()
}

func (m *model) queueText(ws []*waiterM) string {
	var b strings.Builder
	for _, w := range ws {
		fmt.Fprintf(&b, "[L%d %s %v]", w.locker, w.name, w.kind)
	}
	return b.String()
}

func holdersText(hs []Holder) string {
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "[%d %v %s]", h.Token, h.TTL, h.Owner)
	}
	return b.String()
}

func (m *model) modelText(hs []holderM) string {
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "[%s %d %v]", h.h.name, h.token, h.expires-m.clock.now())
	}
	return b.String()
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
