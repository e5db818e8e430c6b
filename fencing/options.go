package fencing

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/wire"
)

// Defaults and limits.
const (
	// DefaultTTL is the lease length when no [WithTTL] option is given.
	DefaultTTL = 30 * time.Second
	// DefaultPrefix is the key prefix when no [WithPrefix] option is given.
	DefaultPrefix = "fencing:"
	// MaxTTL is the longest lease a Locker grants; a longer TTL is rejected with [ErrInvalid].
	// A holder that needs longer renews the lease ([Lock.Extend], or [Locker.Do] does it).
	MaxTTL = 7 * 24 * time.Hour
	// MinCounterExpiry is the shortest idle period [WithCounterExpiry] accepts.
	MinCounterExpiry = time.Second
	// MinTTL is the shortest lease: Redis counts in milliseconds, to which a TTL is rounded up.
	MinTTL = time.Millisecond
	// MaxLimit is the largest limit [WithLimit] accepts.
	MaxLimit = 1024
	// MaxResourceLen is the longest resource name, in bytes, that a Locker accepts.
	MaxResourceLen = 4096
	// MaxLabelLen is the longest label, in bytes, that [WithLabel] accepts.
	MaxLabelLen = 64
)

// The back-offs other than the queued waiter's polls (WithRetryBackoff).
const (
	// retryFirst and retryMost space the retries of a grant's extension to the TTL that
	// failed with an error that can pass, while the lease lasts (Lock.extendLater).
	retryFirst, retryMost = 10 * time.Millisecond, 250 * time.Millisecond
	// campaignFirst and campaignMost space Lead's campaigns that failed.
	campaignFirst, campaignMost = 50 * time.Millisecond, time.Second
)

// An Option configures a [Locker]: give it to [New]. The settings every process locking the
// same resources must agree on ([WithPrefix], [WithServerTimeFloor], [WithCounterExpiry]) and
// the Locker's own ([WithRetryBackoff]) are Options only; the others are also a [CallOption].
type Option interface {
	apply(*config)
}

// A CallOption overrides the Locker's setting for one call of [Locker.TryAcquire],
// [Locker.Acquire], [Locker.Do], [Locker.TryAcquireAll], [Locker.AcquireAll], [Locker.DoAll] or
// [Locker.Lead]; given to [New], it sets the default (but [Shared] and [WithLabel] are per call).
type CallOption interface {
	Option
	callOption()
}

// lockerOption is an Option that only New takes.
type lockerOption func(*config)

func (f lockerOption) apply(c *config) { f(c) }

// callOption is an Option that New and every call take.
type callOption func(*config)

func (f callOption) apply(c *config) { f(c) }
func (callOption) callOption()       {}

// config is a Locker's settings; one call may use a modified copy.
type config struct {
	ttl       time.Duration
	prefix    string
	pollMin   time.Duration // WithRetryBackoff
	pollMax   time.Duration
	replicas  int
	replicaTO time.Duration
	timeFloor bool
	expiry    time.Duration // the fence counter's idle expiry; 0: never
	maxWait   time.Duration // < 0: wait until the context ends
	kind      wire.Kind     // exclusive (Limit 0 or 1), shared, or one of Limit slots
	memo      string        // UnlessMemo's name; "" for none
	label     string        // WithLabel's
	hooks     hookList
	err       error // the first invalid option, returned by every call
}

func defaultConfig() config {
	return config{ttl: DefaultTTL, prefix: DefaultPrefix, pollMin: 50 * time.Millisecond, pollMax: time.Second, maxWait: -1}
}

// with returns c with a call's opts applied, or c itself when there are none.
func (c *config) with(opts []CallOption) *config {
	if len(opts) == 0 {
		return c
	}
	n := *c
	n.hooks = c.hooks[:len(c.hooks):len(c.hooks)] // appends must not share c's array
	for _, o := range opts {
		if o != nil {
			o.apply(&n)
		}
	}
	if n.err == nil {
		n.err = n.conflict()
	}
	return &n
}

// WithTTL sets the lease length, how long the lock stays held unrenewed. Default: [DefaultTTL]
// (30s). Outside [MinTTL] to [MaxTTL], every call returns an error wrapping [ErrInvalid].
func WithTTL(d time.Duration) CallOption {
	return callOption(func(c *config) {
		if err := validTTL(d); err != nil && c.err == nil {
			c.err = err
		}
		c.ttl = d
	})
}

// WithPrefix sets the prefix of every key and channel the Locker uses. Default:
// [DefaultPrefix] ("fencing:"). It must not contain '{' or '}', which would break the keys'
// hash tag; otherwise every call returns an error wrapping [ErrInvalid].
func WithPrefix(p string) Option {
	return lockerOption(func(c *config) {
		if strings.ContainsAny(p, "{}") && c.err == nil {
			c.err = invalidf("prefix %q contains '{' or '}'", p)
		}
		c.prefix = p
	})
}

// WithLimit lets up to n holders hold the resource at once, a counting semaphore across every
// process, with [Locker.TryAcquire], [Locker.Acquire] and [Locker.Do]. Default: 1, the
// exclusive lock. Each holder gets its own [Lock] and token, and releases, extends and loses only
// its own lease. A freed slot goes to the longest waiter, never to a newcomer ahead of queued
// waiters. A token orders the acquisitions but does not exclude the other n-1 holders: fence per
// entity written, or per holder slot (see docs/limits.md).
//
// The limit is recorded with the holders: every caller of a resource should use the same. A
// call that asks for another limit than the live holders' (limit 1 and [Shared] included)
// returns an error wrapping [ErrInvalid] that names both, and changes nothing; once no holder
// is left, the new limit takes effect. Every call with n outside 1 to [MaxLimit], or above 1
// with Shared or a set of resources, returns an error wrapping ErrInvalid, sending nothing.
func WithLimit(n int) CallOption {
	return callOption(func(c *config) {
		if (n < 1 || n > MaxLimit) && c.err == nil {
			c.err = invalidf("limit %d out of range [1, %d]", n, MaxLimit)
		}
		c.kind.Limit = n
	})
}

// Shared makes one acquisition shared, a read/write lock, with [Locker.TryAcquire],
// [Locker.Acquire] and [Locker.Do]: any number of shared holders may hold a resource at once,
// and no exclusive holder while any does. Both kinds wait in the resource's one queue, first
// come, first served, so readers never starve a writer queued before them, and a release grants
// a run of shared waiters at once. Both take tokens from one counter, so a writer's token is
// above every reader's before it, and the reverse (see docs/shared.md). Shared with [WithLimit]
// above 1, with a set of resources or [Locker.Lead], or given to [New], is an error wrapping
// [ErrInvalid], sending nothing; so is a kind the live holders do not share (see WithLimit).
func Shared() CallOption {
	return callOption(func(c *config) { c.kind.Shared = true })
}

// WithRetryBackoff sets how often a queued [Locker.Acquire] checks with Redis when no grant is
// announced: on a Ring, or until the subscription is confirmed, from min doubling up to max with
// ±20% jitter, once subscribed every max; at least once a second either way (keeping its place).
// Default: 50ms to 1s. Values below 1ms, or max below min, are rejected with [ErrInvalid].
// Failed renewals and campaigns have back-offs of their own.
func WithRetryBackoff(min, max time.Duration) Option {
	return lockerOption(func(c *config) {
		if (min < time.Millisecond || max < min) && c.err == nil {
			c.err = invalidf("retry backoff %v..%v", min, max)
		}
		c.pollMin, c.pollMax = min, max
	})
}

// WithMaxWait bounds how long [Locker.Acquire] and [Locker.Do] wait for a busy resource: after
// d they give up with a [*BusyError] (matching [ErrNotAcquired]) whose RetryAfter is the
// holder's remaining lease; 0 makes a single attempt, as TryAcquire does. Default: wait until
// the context ends. A negative d is rejected with [ErrInvalid]. It is meant for one call.
func WithMaxWait(d time.Duration) CallOption {
	return callOption(func(c *config) {
		if d < 0 && c.err == nil {
			c.err = invalidf("max wait %v", d)
		}
		c.maxWait = d
	})
}

// WithReplicas makes every acquisition wait until n replicas acknowledge it, for at most
// timeout, with WAIT in the acquire script's pipeline; if fewer do, the lock is released and the
// call fails with [ErrNotReplicated]. This narrows, but does not close, the window in which a
// failover loses a lock or a token. Default: 0 (no wait). timeout must be positive and below the
// client's ReadTimeout. On a [redis.Ring] it is an error wrapping [ErrInvalid].
func WithReplicas(n int, timeout time.Duration) CallOption {
	return callOption(func(c *config) {
		if (n < 0 || (n > 0 && timeout <= 0)) && c.err == nil {
			c.err = invalidf("replicas %d with timeout %v", n, timeout)
		}
		c.replicas, c.replicaTO = n, timeout
	})
}

// WithServerTimeFloor keeps every new token at or above the Redis server's clock in
// microseconds (TIME), so tokens keep increasing even when the counter is lost: a restart
// without persistence, a failover before replication, an eviction. It assumes the server
// clocks do not step back and stay roughly in sync across a failover, and fewer than a million
// acquisitions per second per resource. Tokens become large (about 1.8e15) but stay exact. A
// grant follows the waiting Locker's setting. Default: off (tokens count 1, 2, 3, …).
func WithServerTimeFloor() Option {
	return lockerOption(func(c *config) { c.timeFloor = true })
}

// WithCounterExpiry lets a resource's fence counter expire once no token has been issued for
// it for d, so that Redis does not keep a counter for every resource ever locked. It implies
// [WithServerTimeFloor]: a counter created again starts above every earlier token unless the
// server clock stepped back by more than d (see docs/design.md). Every acquisition and grant
// resets the expiry in the same script. d must be at least [MinCounterExpiry] and the lease
// ([WithTTL]); otherwise calls return an error wrapping [ErrInvalid]. Every Locker of the same
// resources must use the same setting. Default: counters never expire.
func WithCounterExpiry(d time.Duration) Option {
	return lockerOption(func(c *config) {
		if d < MinCounterExpiry && c.err == nil {
			c.err = invalidf("counter expiry %v below %v", d, MinCounterExpiry)
		}
		c.expiry, c.timeFloor = d, true
	})
}

// WithLabel gives an acquisition a label of the caller's choosing, such as a task ID, a request
// ID or a host name, which [Locker.Inspect] (and fencekit show and locks, and the operators'
// page) shows for its holder or waiter. It is kept in Redis with the lock, at the cost of its
// length. A label is at most [MaxLabelLen] bytes of UTF-8 without control characters; any other
// is an error wrapping [ErrInvalid] of every call it is given to, which then sends nothing.
// Default: none (""). It applies to one acquisition: given to [New], it is an error too.
func WithLabel(label string) CallOption {
	return callOption(func(c *config) {
		if err := validLabel(label); err != nil && c.err == nil {
			c.err = err
		}
		c.label = label
	})
}

// validLabel returns an error wrapping ErrInvalid when label cannot be a label.
func validLabel(label string) error {
	switch {
	case len(label) > MaxLabelLen:
		return invalidf("label of %d bytes exceeds %d", len(label), MaxLabelLen)
	case !utf8.ValidString(label):
		return invalidf("label %q is not UTF-8", label)
	case strings.IndexFunc(label, unicode.IsControl) >= 0:
		return invalidf("label %q has a control character", label)
	}
	return nil
}

// conflict returns an error wrapping ErrInvalid when c's valid options do not go together.
func (c *config) conflict() error {
	switch {
	case c.expiry > 0 && c.ttl > c.expiry:
		return invalidf("ttl %v exceeds the counter expiry %v", c.ttl, c.expiry)
	case c.kind.Shared && c.kind.Limit > 1:
		return invalidf("Shared with WithLimit(%d): a resource is shared or limited, not both", c.kind.Limit)
	}
	return nil
}

// validTTL returns an error wrapping ErrInvalid when d is not a usable lease length.
func validTTL(d time.Duration) error {
	if d < MinTTL || d > MaxTTL {
		return invalidf("ttl %v out of range [%v, %v]", d, MinTTL, MaxTTL)
	}
	return nil
}

// WithHooks adds hooks that observe the Locker's operations (see package observe), as package
// tracing does. Several WithHooks options, of New and of a call alike, add up, in the order
// given: give a set of hooks once. Default: none, and then observation costs nothing.
func WithHooks(h observe.Hooks) CallOption {
	return callOption(func(c *config) {
		if h.Start != nil || h.End != nil || h.Lost != nil {
			c.hooks = append(c.hooks, h)
		}
	})
}

// hookList is the hooks of a Locker or a call.
type hookList []observe.Hooks

// start runs every Start hook and returns the resulting context.
func (hs hookList) start(ctx context.Context, op observe.Op, resource string) context.Context {
	for i := range hs {
		if h := hs[i].Start; h != nil {
			ctx = h(ctx, op, resource)
		}
	}
	return ctx
}

// end runs every End hook, the last added first.
func (hs hookList) end(ctx context.Context, e observe.Event) {
	for i := len(hs) - 1; i >= 0; i-- {
		if h := hs[i].End; h != nil {
			h(ctx, e)
		}
	}
}

// lost runs every Lost hook.
func (hs hookList) lost(ctx context.Context, e observe.Event) {
	for i := len(hs) - 1; i >= 0; i-- {
		if h := hs[i].Lost; h != nil {
			h(ctx, e)
		}
	}
}

// acquired returns the event of an acquisition; a single attempt's busy answer is no error.
func acquired(op observe.Op, resource string, attempts int, begin time.Time, lock *Lock, err error) observe.Event {
	e := observe.Event{Op: op, Resource: resource, Attempts: attempts, Elapsed: time.Since(begin)}
	switch {
	case err == nil && lock != nil:
		e.Outcome, e.Token, e.Label, e.ClockBehind = observe.OutcomeAcquired, lock.token, lock.label, lock.behind
	case err == nil:
		e.Outcome = observe.OutcomeAcquired
	default:
		e.Outcome, e.Err = outcomeOf(err), err
		if e.Outcome == observe.OutcomeBusy && (op == observe.OpTryAcquire || op == observe.OpTryAcquireAll) {
			e.Err = nil
		}
	}
	return e
}

// outcomeOf classifies an error for hooks.
func outcomeOf(err error) observe.Outcome {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return observe.OutcomeCancelled
	case errors.Is(err, ErrNotHeld):
		return observe.OutcomeNotHeld
	case errors.Is(err, ErrNotAcquired):
		return observe.OutcomeBusy
	}
	return observe.OutcomeError
}
