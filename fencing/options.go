package fencing

import (
	"fmt"
	"strconv"
	"strings"
	"time"
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
	// MinTTL is the shortest lease: Redis counts TTLs in milliseconds. A TTL that is not a
	// whole number of milliseconds is rounded up.
	MinTTL = time.Millisecond
)

// An Option configures a [Locker] when given to [New], or one call when given to
// [Locker.TryAcquire], [Locker.Acquire] or [Locker.Do], where it overrides the Locker's
// setting for that call only.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is a Locker's settings; one call may use a modified copy.
type config struct {
	ttl       time.Duration
	prefix    string
	retryMin  time.Duration
	retryMax  time.Duration
	replicas  int
	replicaTO time.Duration
	timeFloor bool
	expiry    time.Duration // the fence counter's idle expiry; 0: never
	maxWait   time.Duration // < 0: wait until the context ends
	hooks     hookList
	err       error // the first invalid option, returned by every call
}

func defaultConfig() config {
	return config{
		ttl:      DefaultTTL,
		prefix:   DefaultPrefix,
		retryMin: 50 * time.Millisecond,
		retryMax: time.Second,
		maxWait:  -1,
	}
}

// with returns c with opts applied, or c itself when there are none.
func (c *config) with(opts []Option) *config {
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
	return &n
}

// WithTTL sets the lease length: how long the lock stays held without renewal. Default:
// [DefaultTTL] (30s). It must be between [MinTTL] and [MaxTTL]; otherwise every call returns
// an error wrapping [ErrInvalid].
func WithTTL(d time.Duration) Option {
	return optionFunc(func(c *config) {
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
	return optionFunc(func(c *config) {
		if strings.ContainsAny(p, "{}") && c.err == nil {
			c.err = invalidf("prefix %q contains '{' or '}'", p)
		}
		c.prefix = p
	})
}

// WithRetryBackoff sets how often a queued [Locker.Acquire] checks with Redis when no
// announcement of a grant arrives: on a Ring, where nothing is announced, or until the
// Locker's subscription is confirmed, it starts at min and doubles up to max, with ±20%
// jitter; once subscribed, it checks every max. Either way it checks at least once a second,
// which keeps its place in the queue alive (a place not renewed for 3s is dropped).
// Default: 50ms to 1s. Values below 1ms, or max below min, are rejected with [ErrInvalid].
func WithRetryBackoff(min, max time.Duration) Option {
	return optionFunc(func(c *config) {
		if (min < time.Millisecond || max < min) && c.err == nil {
			c.err = invalidf("retry backoff %v..%v", min, max)
		}
		c.retryMin, c.retryMax = min, max
	})
}

// WithMaxWait bounds how long [Locker.Acquire] and [Locker.Do] wait for a busy resource:
// after d they give up with an error wrapping [ErrNotAcquired] (and [RetryAfter] reports
// the holder's remaining TTL). WithMaxWait(0) makes a single attempt, as TryAcquire does.
// Default: wait until the context ends. A negative d is rejected with [ErrInvalid].
// It is meant as a per-call option; the Echo middleware and the Asynq adapter use it.
func WithMaxWait(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 0 && c.err == nil {
			c.err = invalidf("max wait %v", d)
		}
		c.maxWait = d
	})
}

// WithReplicas makes every acquisition wait until n replicas acknowledge it, for at most
// timeout, using WAIT on the same connection as the acquire script (one pipeline). If fewer
// acknowledge, the lock is released and the call fails with [ErrNotReplicated]. This narrows,
// but does not close, the window in which a failover loses a lock or a token (see the
// README's guarantees). Default: 0 (no wait). timeout must be positive and below the
// client's ReadTimeout. Not supported on a [redis.Ring].
func WithReplicas(n int, timeout time.Duration) Option {
	return optionFunc(func(c *config) {
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
// acquisitions per second per resource. Tokens become large (about 1.8e15) but stay exact.
// Default: off (tokens count 1, 2, 3, …).
func WithServerTimeFloor() Option {
	return optionFunc(func(c *config) { c.timeFloor = true })
}

// WithCounterExpiry lets a resource's fence counter expire once no token has been issued for
// it for d, so that Redis does not keep a counter for every resource ever locked. It implies
// [WithServerTimeFloor]: a counter created again starts at the server clock in
// microseconds, above every token issued before it, as long as the server clock has not
// stepped back by more than d (see the guarantees in docs/design.md). Every acquisition and
// every grant from the queue resets the expiry in the same script. d must be at least
// [MinCounterExpiry] and at least the lease ([WithTTL]); otherwise calls return an error
// wrapping [ErrInvalid]. Every Locker that locks the same resources must use the same
// setting. Default: counters never expire.
func WithCounterExpiry(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < MinCounterExpiry && c.err == nil {
			c.err = invalidf("counter expiry %v below %v", d, MinCounterExpiry)
		}
		c.expiry, c.timeFloor = d, true
	})
}

// opts returns the scripts' opts argument for c (see grant.lua): publish, then '1' when
// tokens are floored at the server clock ('0' otherwise), then the counter's expiry in
// milliseconds, if any.
func (c *config) opts(publish byte) string {
	if !c.timeFloor && c.expiry == 0 {
		switch publish { // the usual settings, without building them
		case 'P':
			return "P0"
		case 'S':
			return "S0"
		case '-':
			return "-0"
		}
	}
	b := []byte{publish, '0'}
	if c.timeFloor {
		b[1] = '1'
	}
	if c.expiry > 0 {
		b = strconv.AppendInt(b, millis(c.expiry), 10)
	}
	return string(b)
}

// WithHooks adds hooks that observe the Locker's operations (see [Hooks]); the tracing
// package uses this seam. Several WithHooks options add up; hooks run in the order given.
// Default: none, and then observation costs nothing.
func WithHooks(h Hooks) Option {
	return optionFunc(func(c *config) {
		if h.Start != nil || h.End != nil || h.Lost != nil {
			c.hooks = append(c.hooks, h)
		}
	})
}

// conflict returns an error wrapping ErrInvalid when c's options, each valid, cannot be
// used together.
func (c *config) conflict() error {
	if c.expiry > 0 && c.ttl > c.expiry {
		return invalidf("ttl %v exceeds the counter expiry %v", c.ttl, c.expiry)
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

// millis returns d in whole milliseconds, rounded up.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
