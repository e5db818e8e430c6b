package fencing

import (
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencekit/fencekit/internal/topology"
	"github.com/redis/go-redis/v9"
)

// A Locker takes fenced locks on a Redis server. It is safe for concurrent use; create one per
// client and share it. Close it when done to free the subscription that wakes waiters.
type Locker struct {
	client redis.UniversalClient
	topo   topology.Topology
	cfg    config
	room   *room        // the calls that wait; nil for a Locker not made by New
	waits  atomic.Int32 // calls in the room now: when 0, a release need not ask it anything

	closing sync.Once
	done    chan struct{} // closed by Close
}

// New returns a Locker that keeps its locks on client: a *redis.Client (also from
// redis.NewFailoverClient), a *redis.ClusterClient (also from redis.NewFailoverClusterClient)
// or a *redis.Ring. A client of any other type, such as one that wraps a *redis.Client, is taken
// for a single server (one pub/sub connection, one script for a whole set, WAIT through it):
// give New a Cluster's or a Ring's client itself. New does not talk to Redis, nor panic: with an
// invalid option or a nil client, every call on the Locker returns an error wrapping [ErrInvalid].
//
// A Ring spreads resources over independent servers; adding or removing a shard moves a
// resource to a server whose counter is lower, so tokens stop increasing: prefer a Client or a
// ClusterClient. On a Ring, waiters poll instead of subscribing, and WithReplicas is an error.
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
	case l.cfg.kind.Shared:
		l.cfg.err = invalidf("Shared applies to one call, not to a Locker")
	case l.cfg.label != "":
		l.cfg.err = invalidf("WithLabel applies to one call, not to a Locker")
	default:
		l.cfg.err = l.cfg.conflict()
	}
	l.room = newRoom(l, l.cfg.err == nil)
	return l
}

// Client returns the Redis client the Locker was created with, nil for one not made by New.
func (l *Locker) Client() redis.UniversalClient {
	if l == nil {
		return nil
	}
	return l.client
}

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

// Settings returns the Locker's settings (the defaults for one not made by New), for diagnostics.
func (l *Locker) Settings() Settings {
	c := defaultConfig()
	if l != nil && l.room != nil {
		c = l.cfg
	}
	return Settings{TTL: c.ttl, Prefix: c.prefix, MaxWait: c.maxWait, Limit: max(c.kind.Limit, 1),
		Replicas: c.replicas, ReplicaTimeout: c.replicaTO, ServerTimeFloor: c.timeFloor, CounterExpiry: c.expiry,
		RetryMin: c.pollMin, RetryMax: c.pollMax}
}

func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Err returns the error, if any, that every call would return before reaching Redis, sending
// nothing: [ErrClosed] after Close, or one wrapping [ErrInvalid] for a nil client or bad option.
func (l *Locker) Err() error {
	if err := l.made(); err != nil {
		return opErr("locker", "", err)
	}
	if isDone(l.done) {
		return opErr("locker", "", ErrClosed)
	}
	return nil
}

// Close frees the Locker's subscription and wakes its waiters, whose calls then return an error
// wrapping [ErrClosed], as later acquisitions do. Locks already held can still be released and
// extended. Close does not close the Redis client. It is safe to call more than once.
func (l *Locker) Close() error {
	if l == nil || l.room == nil {
		return nil
	}
	l.closing.Do(func() {
		close(l.done)
		l.room.close()
	})
	return nil
}
