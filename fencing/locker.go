package fencing

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Locker takes fenced locks on a Redis server. It is safe for concurrent use by many
// goroutines; create one per client and share it. Close it when done to free the
// subscription that wakes waiters.
type Locker struct {
	client redis.UniversalClient
	cfg    config
	waits  *waiting

	closing sync.Once
	done    chan struct{} // closed by Close
}

// New returns a Locker that keeps its locks on client: a *redis.Client (also from
// redis.NewFailoverClient), a *redis.ClusterClient (also from redis.NewFailoverClusterClient)
// or a *redis.Ring. New does not talk to Redis. An invalid option or a nil client does not
// panic: every call on the Locker then returns an error wrapping [ErrInvalid].
//
// A Ring spreads resources over independent servers; adding or removing a shard moves a
// resource to a server whose counter is lower, so tokens stop increasing. Prefer a Client or
// a ClusterClient. On a Ring, waiters poll instead of subscribing.
func New(client redis.UniversalClient, opts ...Option) *Locker {
	l := &Locker{client: client, cfg: defaultConfig(), done: make(chan struct{})}
	for _, o := range opts {
		if o != nil {
			o.apply(&l.cfg)
		}
	}
	if isNil(client) && l.cfg.err == nil {
		l.cfg.err = invalidf("nil redis client")
	}
	if l.cfg.err == nil {
		l.cfg.err = l.cfg.conflict()
	}
	l.waits = newWaiting(client, l.cfg.err == nil, l.passOn, l.done)
	return l
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

// TryAcquire makes one attempt to take the lock on resource. It returns the lock and its
// fencing token, or an error wrapping [ErrNotAcquired] when another owner holds it or
// waiters are queued for it (the error also carries the holder's remaining TTL; see
// [RetryAfter]) or when the reply came back too late to trust the lease. Any other error
// (Redis unreachable, invalid input wrapping [ErrInvalid], a context already done) means
// nothing is held. A call refused before it reaches Redis (invalid input, a closed Locker, a
// context already done) sends nothing, and hooks still observe it. Options override the
// Locker's settings for this call, such as [WithTTL].
func (l *Locker) TryAcquire(ctx context.Context, resource string, opts ...Option) (*Lock, error) {
	cfg := l.cfg.with(opts)
	ctx = cfg.hooks.start(ctx, OpTryAcquire, resource)
	begin := time.Now()
	var lock *Lock
	var r attemptReply
	attempts := 0
	err := l.check(ctx, cfg, resource)
	if err == nil {
		attempts = 1
		lock, r, err = l.attempt(ctx, cfg, resource, resourceKeys(cfg.prefix, resource), "", "")
	}
	ev := Event{Op: OpTryAcquire, Resource: resource, Attempts: attempts, Elapsed: time.Since(begin)}
	switch {
	case err != nil:
		ev.Outcome, ev.Err = outcomeOf(err), err
	case lock == nil:
		ev.Outcome = OutcomeBusy
		err = &busyError{resource: resource, retryAfter: r.pttl}
	default:
		ev.Outcome, ev.Token, ev.ClockBehind = OutcomeAcquired, lock.token, lock.behind
	}
	cfg.hooks.end(ctx, ev)
	return lock, err
}

// Acquire takes the lock on resource, waiting while another owner holds it. A waiter that
// finds the resource busy joins the resource's queue in Redis; the holder's release hands the
// lock to the longest-waiting waiter (of any Locker) in the same round trip, with a new token
// and a lease of the TTL or 3s, whichever is shorter, and announces it on the resource's
// channel, which one pub/sub connection per Locker carries (one per primary on a Cluster; a
// Ring polls). Acquire returns at once; the Lock extends a shorter lease to the TTL a third of
// the way into it, in the background, unless it is released or extended first (so
// [Lock.TTL] may show 3s at first). A queued waiter also checks with Redis at
// least once a second, which keeps its place alive and takes a lock whose holder's lease ran
// out. Waiting is first come, first served: while waiters are queued, neither TryAcquire nor
// Acquire takes the lock ahead of them, even when it is free.
//
// When ctx ends first, Acquire returns an error that matches both [ErrNotAcquired] and
// ctx.Err() under errors.Is, and holds nothing: the waiter leaves the queue, and a lock
// granted to it meanwhile goes to the next waiter. A Redis error on the way into the queue
// ends the call at once and is returned as it is (it does not match ErrNotAcquired). Once
// queued, a waiter keeps its place through errors that can pass by themselves (a lost
// connection, a timeout, LOADING, READONLY, CLUSTERDOWN, MASTERDOWN, TRYAGAIN, BUSY: a restart
// or a failover) and checks again with a back-off, for up to 30s of them in a row; the
// error that ends the wait then also matches the last of them. Any other error ends it at once.
func (l *Locker) Acquire(ctx context.Context, resource string, opts ...Option) (*Lock, error) {
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

// lateReply is attempt's "holder TTL" when the acquire succeeded but its reply came back
// after the lease could have run out.
const lateReply time.Duration = -1

// attemptReply is what attempt learnt when it did not take the lock.
type attemptReply struct {
	pttl time.Duration // busy: the holder's remaining TTL (lateReply when the lease lapsed in transit)
	held string        // queued: the lock value the script saw, "" when none
}

// attempt runs the acquire script once. When elem is set and the resource is busy, the script
// appends elem to the resource's queue, and writes entry to the Locker's waiter key unless
// entry is "" (see acquire.lua). It returns the lock, or nil and what the script saw, or an
// error.
func (l *Locker) attempt(ctx context.Context, cfg *config, resource string, k keys, elem, entry string) (*Lock, attemptReply, error) {
	owner, err := newOwner()
	if err != nil {
		return nil, attemptReply{}, err
	}
	ms := millis(cfg.ttl)
	args := []any{owner, ms, cfg.opts(l.waits.publish)}
	if elem != "" {
		args = append(args, elem, entry)
	}
	sent := time.Now()
	res, err := l.runAcquire(ctx, cfg, k, args)
	if err != nil {
		// Unless Redis answered with an error (the script failed), it may have run and
		// left us holding the lock: free it rather than strand it until its TTL.
		var reply redis.Error
		if !errors.As(err, &reply) || errors.Is(err, ErrNotReplicated) {
			l.releaseOwner(ctx, k, owner)
		}
		if ctx.Err() != nil {
			return nil, attemptReply{}, join(ErrNotAcquired, ctx.Err())
		}
		return nil, attemptReply{}, opErr("acquire", resource, err)
	}
	a, err := parseAcquire(res)
	if err != nil {
		return nil, attemptReply{}, opErr("acquire", resource, err)
	}
	switch a.flag {
	case flagBusy:
		return nil, attemptReply{pttl: time.Duration(a.pttl) * time.Millisecond}, nil
	case flagQueued:
		return nil, attemptReply{held: a.held}, nil
	}
	lock := &Lock{
		locker:   l,
		hooks:    cfg.hooks,
		resource: resource,
		keys:     k,
		value:    owner + ":" + strconv.FormatInt(a.token, 10),
		token:    a.token,
		acquired: sent,
		behind:   time.Duration(a.behind) * time.Microsecond,
	}
	lock.setValidUntil(sent, time.Duration(ms)*time.Millisecond)
	if err := ctx.Err(); err != nil {
		l.releaseOwner(ctx, k, owner)
		return nil, attemptReply{}, join(ErrNotAcquired, err)
	}
	if !lock.valid() {
		// The reply came back after the lease could have run out: the lock may already
		// belong to someone else. Count it as busy; Acquire tries again.
		l.releaseOwner(ctx, k, owner)
		return nil, attemptReply{pttl: lateReply}, nil
	}
	return lock, attemptReply{}, nil
}

// runAcquire sends the acquire script with args, followed by WAIT on the same connection when
// replicas must acknowledge it.
func (l *Locker) runAcquire(ctx context.Context, cfg *config, k keys, args []any) (any, error) {
	if cfg.replicas == 0 {
		return acquireScript.run(ctx, l.client, k, args...).Result()
	}
	return l.replicated(ctx, cfg, k, acquireSrc, args, func(res any) bool {
		a, err := parseAcquire(res)
		return err == nil && a.flag == flagAcquired
	})
}

// replicated runs a script with EVAL on the primary that owns k, followed by WAIT on the same
// connection, and fails with ErrNotReplicated when the script's reply says it wrote (wrote)
// and fewer replicas than cfg.replicas acknowledged it.
func (l *Locker) replicated(ctx context.Context, cfg *config, k keys, src string, args []any, wrote func(any) bool) (any, error) {
	res, acks, err := l.pipeWait(ctx, cfg, k, src, args)
	if c, ok := l.client.(*redis.ClusterClient); ok && isMoved(err) {
		// The slot moved (a failover, resharding): the script did not run. go-redis learns
		// of it only from its own commands, not from a reply inside this pipeline, so reload
		// the slot map and send the pipeline to the new owner.
		clusterRoute{c}.refresh(ctx)
		res, acks, err = l.pipeWait(ctx, cfg, k, src, args)
	}
	if err != nil {
		return nil, err
	}
	if wrote(res) {
		n, err := acks.Result()
		if err != nil {
			return nil, fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err)
		}
		if n < int64(cfg.replicas) {
			return nil, fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, n, cfg.replicas, cfg.replicaTO)
		}
	}
	return res, nil
}

// isMoved reports whether err is a Cluster's MOVED reply.
func isMoved(err error) bool {
	_, moved := redis.IsMovedError(err)
	return moved
}

// pipeWait sends a script with EVAL and WAIT in one pipeline to the primary that owns k.
func (l *Locker) pipeWait(ctx context.Context, cfg *config, k keys, src string, args []any) (any, *redis.IntCmd, error) {
	var node redis.Cmdable
	switch c := l.client.(type) {
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, k.lock)
		if err != nil {
			return nil, nil, err
		}
		node = n
	case *redis.Client:
		node = c
	default:
		return nil, nil, invalidf("WithReplicas needs a *redis.Client or *redis.ClusterClient, not %T", l.client)
	}
	// EVAL, not EVALSHA: a NOSCRIPT reply inside the pipeline would cost a second WAIT.
	pipe := node.Pipeline()
	cmd := pipe.Eval(ctx, src, k.script(), args...)
	acks := redis.NewIntCmd(ctx, "wait", cfg.replicas, cfg.replicaTO.Milliseconds())
	_ = pipe.Process(ctx, acks)
	_, _ = pipe.Exec(ctx)
	res, err := cmd.Result()
	return res, acks, err
}

// releaseOwner deletes the lock if owner holds it, whatever its token, with a fresh, short
// context: the caller's may be done. Errors are ignored; the lease runs out by itself if this
// fails.
func (l *Locker) releaseOwner(ctx context.Context, k keys, owner string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = l.release(rctx, k, owner+":")
}

// release runs the release script for a lock value, or for "<owner>:" (any token of owner).
// It reports whether that value held the lock. A grant of the lock to this Locker's own
// waiters, which the script returns instead of announcing, is delivered to them.
func (l *Locker) release(ctx context.Context, k keys, value string) (bool, error) {
	sent := time.Now()
	res, err := releaseScript.run(ctx, l.client, k, l.releaseArgs(k, value)...).Result()
	if err != nil {
		return false, err
	}
	return l.releaseReply(k, sent, value, res)
}

// releaseArgs returns the release script's arguments for a lock value (see release).
func (l *Locker) releaseArgs(k keys, value string) []any {
	ws := l.waits
	args := []any{value, l.cfg.opts(ws.publish)}
	if ws.queuedOn(k.channel) {
		args = append(args, ws.id)
	}
	return args
}

// releaseReply decodes the release script's reply to a call sent at sent and delivers a
// grant to this Locker's own waiters (see release).
func (l *Locker) releaseReply(k keys, sent time.Time, value string, res any) (bool, error) {
	var elem string
	var token int64
	var err error
	switch r := res.(type) {
	case int64:
		switch r {
		case flagNotHeld:
			return false, nil
		case flagReleased:
		default:
			return false, fmt.Errorf("unexpected reply %v", res)
		}
	case []any:
		if len(r) != 3 || r[0] != int64(flagGranted) {
			return false, fmt.Errorf("unexpected reply %v", res)
		}
		elem, _ = r[1].(string)
		if token, err = parseToken(r[2]); err != nil {
			return true, err
		}
	default:
		return false, fmt.Errorf("unexpected reply %v", res)
	}
	l.waits.released(k, sent, value, elem, token)
	return true, nil
}

// releaseTimeout bounds releases made with a fresh context.
const releaseTimeout = 5 * time.Second

// parseToken decodes a token that a script returned as a string.
func parseToken(v any) (int64, error) {
	s, _ := v.(string)
	token, err := strconv.ParseInt(s, 10, 64)
	if err != nil || token <= 0 {
		return 0, fmt.Errorf("bad token %q in reply", s)
	}
	return token, nil
}

// acquireReply is the acquire script's reply.
type acquireReply struct {
	flag   int64
	token  int64  // flagAcquired
	pttl   int64  // flagBusy
	held   string // flagQueued
	behind int64  // flagAcquired: microseconds the server clock is behind the last token
}

// parseAcquire decodes the acquire script's reply: the token alone when acquired, or an
// array led by a flag.
func parseAcquire(res any) (acquireReply, error) {
	if s, ok := res.(string); ok {
		token, err := parseToken(s)
		return acquireReply{flag: flagAcquired, token: token}, err
	}
	arr, _ := res.([]any)
	if len(arr) < 2 {
		return acquireReply{}, fmt.Errorf("unexpected reply %v", res)
	}
	var a acquireReply
	a.flag, _ = arr[0].(int64)
	switch a.flag {
	case flagBusy:
		a.pttl, _ = arr[1].(int64)
	case flagQueued:
		a.held, _ = arr[1].(string)
	case flagAcquired:
		token, err := parseToken(arr[1])
		if err != nil {
			return acquireReply{}, err
		}
		a.token = token
		if len(arr) > 2 {
			a.behind, _ = arr[2].(int64)
		}
	default:
		return acquireReply{}, fmt.Errorf("unexpected reply %v", res)
	}
	return a, nil
}

// newOwner returns 16 random bytes as unpadded base64url: 22 characters, never ':'.
func newOwner() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("fencing: owner value: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
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

// busyError is TryAcquire's error when another owner holds the lock, and Acquire's when its
// wait ended.
type busyError struct {
	resource   string
	retryAfter time.Duration
	waited     time.Duration // Acquire: how long it waited; 0 for a single attempt
	ahead      int           // with waited: waiters ahead in the queue when it left, -1 unknown
}

func (e *busyError) Error() string {
	if e.retryAfter == lateReply {
		return fmt.Sprintf("fencing: not acquired: %q: Redis replied after the lease could have run out", e.resource)
	}
	msg := fmt.Sprintf("fencing: not acquired: %q is held by another owner", e.resource)
	if e.waited <= 0 {
		return msg
	}
	msg += fmt.Sprintf(" after waiting %v", e.waited.Round(time.Millisecond))
	switch {
	case e.ahead == 0:
		msg += ", first in the queue"
	case e.ahead == 1:
		msg += ", 1 waiter ahead"
	case e.ahead > 1:
		msg += fmt.Sprintf(", %d waiters ahead", e.ahead)
	}
	return msg
}

func (e *busyError) Is(target error) bool { return target == ErrNotAcquired }

// RetryAfter reports how long the holder's lease had left when an acquisition failed because
// the resource was busy: the remaining TTL reported by Redis in the same round trip. The
// second result is false when err carries no such figure.
func RetryAfter(err error) (time.Duration, bool) {
	var b *busyError
	if errors.As(err, &b) && b.retryAfter > 0 {
		return b.retryAfter, true
	}
	return 0, false
}
