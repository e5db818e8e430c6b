package fencing

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/topology"
)

// A Locker takes fenced locks on a Redis server. It is safe for concurrent use by many
// goroutines; create one per client and share it. Close it when done to free the
// subscription that wakes waiters.
type Locker struct {
	client redis.UniversalClient
	topo   topology.Topology
	cfg    config
	waits  *waiting

	closing sync.Once
	done    chan struct{} // closed by Close
}

// New returns a Locker that keeps its locks on client: a *redis.Client (also from
// redis.NewFailoverClient), a *redis.ClusterClient (also from redis.NewFailoverClusterClient)
// or a *redis.Ring. A client of any other type, such as one that wraps a *redis.Client, is
// taken for a single server: its pub/sub connection carries every resource's announcements,
// one script takes a whole set of resources, and WithReplicas sends its WAIT through it. Wrap
// a Cluster's or a Ring's client and those assumptions fail: give New the client itself.
// New does not talk to Redis. An invalid option or a nil client does not panic: every call
// on the Locker then returns an error wrapping [ErrInvalid].
//
// A Ring spreads resources over independent servers; adding or removing a shard moves a
// resource to a server whose counter is lower, so tokens stop increasing. Prefer a Client or
// a ClusterClient. On a Ring, waiters poll instead of subscribing, and WithReplicas is an
// error.
func New(client redis.UniversalClient, opts ...Option) *Locker {
	l := &Locker{client: client, topo: topology.Of(client), cfg: defaultConfig(), done: make(chan struct{})}
	for _, o := range opts {
		if o != nil {
			o.apply(&l.cfg)
		}
	}
	switch {
	case l.cfg.err != nil:
	case isNil(client):
		l.cfg.err = invalidf("nil redis client")
	case l.cfg.mode.shared:
		l.cfg.err = invalidf("Shared applies to one call, not to a Locker")
	default:
		l.cfg.err = l.cfg.conflict()
	}
	l.waits = newWaiting(client, l.topo, l.cfg.err == nil, l.passOn, l.done)
	return l
}

// Client returns the Redis client the Locker was created with.
func (l *Locker) Client() redis.UniversalClient { return l.client }

// Settings are a Locker's own settings, as [New] resolved them: the defaults of every call,
// and the settings that are the Locker's alone. [Locker.Settings] returns them.
type Settings struct {
	TTL             time.Duration // WithTTL
	Prefix          string        // WithPrefix
	MaxWait         time.Duration // WithMaxWait; -1: until the context ends
	Limit           int           // WithLimit; 1: exclusive
	Replicas        int           // WithReplicas: the replicas that must acknowledge an acquisition
	ReplicaTimeout  time.Duration // WithReplicas
	ServerTimeFloor bool          // WithServerTimeFloor, or implied by WithCounterExpiry
	CounterExpiry   time.Duration // WithCounterExpiry; 0: counters never expire
	RetryMin        time.Duration // WithRetryBackoff
	RetryMax        time.Duration // WithRetryBackoff
}

// Settings returns the Locker's settings, for diagnostics (package servercheck uses them).
func (l *Locker) Settings() Settings {
	c := &l.cfg
	return Settings{
		TTL: c.ttl, Prefix: c.prefix, MaxWait: c.maxWait, Limit: max(c.mode.limit, 1),
		Replicas: c.replicas, ReplicaTimeout: c.replicaTO, ServerTimeFloor: c.timeFloor,
		CounterExpiry: c.expiry, RetryMin: c.pollMin, RetryMax: c.pollMax,
	}
}

func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Err reports whether the Locker is usable: it returns the error that every TryAcquire,
// Acquire and Do call would return before reaching Redis, one wrapping [ErrInvalid] for a nil
// client or an invalid option given to [New], or [ErrClosed] after Close; nil otherwise. It
// sends nothing to Redis.
func (l *Locker) Err() error {
	if l.cfg.err != nil {
		return l.cfg.err
	}
	if isDone(l.done) {
		return ErrClosed
	}
	return nil
}

// Close frees the Locker's subscription and wakes its waiters, whose Acquire calls then
// return an error wrapping [ErrClosed]; later TryAcquire, Acquire and Do calls return it too.
// Locks already held can still be released and extended. Close does not close the Redis
// client. It is safe to call more than once.
func (l *Locker) Close() error {
	l.closing.Do(func() {
		close(l.done)
		l.waits.close()
	})
	return nil
}

// TryAcquire makes one attempt to take resource: exclusively, or with [Shared] beside other
// shared holders, or with [WithLimit] one of its slots. It returns the lock and its fencing
// token, or a [*BusyError] (matching [ErrNotAcquired]) when the resource is busy: held in a
// way this call cannot join, or waiters are queued for it (the error says how long the
// holders' lease had left), or when the reply came back too late to trust the lease. Any other
// error (Redis unreachable, invalid input wrapping [ErrInvalid], a context already done) means
// nothing is held. A call refused before it reaches Redis (invalid input, a closed Locker, a
// context already done) sends nothing, and hooks still observe it. Options override the
// Locker's settings for this call, such as [WithTTL].
func (l *Locker) TryAcquire(ctx context.Context, resource string, opts ...CallOption) (*Lock, error) {
	cfg := l.cfg.with(opts)
	ctx = cfg.hooks.start(ctx, OpTryAcquire, resource)
	begin := time.Now()
	var lock *Lock
	var busy *BusyError
	attempts := 0
	err := l.check(ctx, cfg, resource)
	if err == nil {
		attempts = 1
		var locks []*Lock
		var r attemptReply
		locks, r, err = l.attempt(ctx, cfg, []member{{name: resource, keys: resourceKeys(cfg.prefix, resource)}}, "", "")
		switch {
		case err != nil:
			err = opErr("acquire", resource, err)
		case len(locks) > 0:
			lock = locks[0]
		default:
			busy, err = r.busy, r.busy
		}
	}
	ev := Event{Op: OpTryAcquire, Resource: resource, Attempts: attempts, Elapsed: time.Since(begin)}
	switch {
	case busy != nil:
		ev.Outcome = OutcomeBusy
	case err != nil:
		ev.Outcome, ev.Err = outcomeOf(err), err
	default:
		ev.Outcome, ev.Token, ev.ClockBehind = OutcomeAcquired, lock.token, lock.behind
	}
	cfg.hooks.end(ctx, ev)
	return lock, err
}

// Acquire takes resource as TryAcquire does, waiting while it is busy. Waiting is first come,
// first served across every process that locks the resource, in a queue kept in Redis: while
// waiters are queued, neither TryAcquire nor Acquire takes the resource ahead of them, even
// when it is free, and a shared request waits behind an exclusive one queued before it. A
// release hands the resource to the longest-waiting waiters in the same round trip and wakes
// only their processes; a holder whose lease runs out is replaced about a round trip after
// its end. The Lock returned may start with a shorter lease than the TTL and is extended to
// it in the background, unless it is released or extended first (see docs/waiting.md).
//
// When ctx ends first, Acquire returns an error that matches both [ErrNotAcquired] and
// ctx.Err() under errors.Is, and holds nothing: the waiter leaves the queue, and a grant to it
// meanwhile goes to the next waiter. A Redis error on the way into the queue ends the call at
// once and is returned as it is (it does not match ErrNotAcquired). Once queued, a waiter keeps
// its place through errors that can pass by themselves (a lost connection, a timeout,
// LOADING, READONLY, CLUSTERDOWN, MASTERDOWN, TRYAGAIN, BUSY: a restart or a failover) for up
// to 30s of them in a row; the error that ends the wait then also matches the last of them.
// Any other error ends it at once.
func (l *Locker) Acquire(ctx context.Context, resource string, opts ...CallOption) (*Lock, error) {
	return l.acquire(ctx, l.cfg.with(opts), resource)
}

// acquire is Acquire with the call's settings resolved.
func (l *Locker) acquire(ctx context.Context, cfg *config, resource string) (*Lock, error) {
	ctx = cfg.hooks.start(ctx, OpAcquire, resource)
	begin := time.Now()
	var lock *Lock
	attempts := 0
	err := l.check(ctx, cfg, resource)
	if err == nil {
		lock, attempts, err = l.wait(ctx, cfg, resource)
	}
	ev := Event{Op: OpAcquire, Resource: resource, Attempts: attempts, Elapsed: time.Since(begin)}
	if err != nil {
		ev.Outcome, ev.Err = outcomeOf(err), err
	} else {
		ev.Outcome, ev.Token, ev.ClockBehind = OutcomeAcquired, lock.token, lock.behind
	}
	cfg.hooks.end(ctx, ev)
	return lock, err
}

// check validates a call before anything is sent.
func (l *Locker) check(ctx context.Context, cfg *config, resource string) error {
	if cfg.err != nil {
		return cfg.err
	}
	if err := cfg.conflict(); err != nil {
		return err
	}
	if err := validResource(resource); err != nil {
		return err
	}
	if isDone(l.done) {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return join(ErrNotAcquired, err)
	}
	return nil
}

// outcomeOf classifies an error for hooks.
func outcomeOf(err error) Outcome {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return OutcomeCancelled
	case errors.Is(err, ErrNotHeld):
		return OutcomeNotHeld
	case errors.Is(err, ErrNotAcquired):
		return OutcomeBusy
	}
	return OutcomeError
}

// isDone reports whether done is closed.
func isDone(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}
