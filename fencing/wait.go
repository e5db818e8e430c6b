package fencing

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// hub is a Locker's side of waiting: one pub/sub connection that carries the release
// messages of every resource this Locker waits on, and a FIFO queue of waiters per resource.
//
// Only the waiter at the front of a queue talks to Redis; the others wait for their turn, so
// waiters of one Locker are served in arrival order and a release wakes one of them, not a
// herd. A release message wakes the front waiter; so does the holder's TTL running out
// (the waiter sleeps no longer than the TTL the busy reply reported) and, in case a message
// is lost or the subscription drops, a back-off with jitter.
type hub struct {
	id      string // random; the payload of this Locker's release messages
	client  redis.UniversalClient
	enabled bool // false on a Ring, or when the Locker is unusable: waiters poll
	// handOff is true while a release may hand the lock to a waiter of this Locker (see
	// handoff.go): PUBSUB NUMSUB on the server that runs a release counts this Locker's own
	// subscription (not on a Cluster, where it counts one node's subscribers), and the
	// server has not refused the hand-off script (an ACL without PUBSUB, say).
	handOff atomic.Bool

	closed atomic.Bool
	done   chan struct{} // closed by close
	nq     atomic.Int32  // len(queues), read without the lock on the uncontended path
	nc     atomic.Int32  // len(courtesy), likewise

	subMu      sync.Mutex // orders SUBSCRIBE and UNSUBSCRIBE commands
	mu         sync.Mutex // guards the fields below
	ps         *redis.PubSub
	readerDone chan struct{}
	queues     map[string]*queue // by release channel
	courtesy   map[string]time.Time
}

// queue holds the waiters of one resource in arrival order.
type queue struct {
	waiters []*waiter
	ready   chan struct{} // closed when Redis confirms the subscription
	isReady bool
}

type waiter struct {
	cfg   *config       // the waiting call's settings
	turn  chan struct{} // closed when the waiter reaches the front
	wake  chan struct{} // a release message arrived (capacity 1)
	grant chan *Lock    // the lock, handed over by a release of this Locker (capacity 1)
	// taken is set before turn closes when the waiter ahead left with the lock: the
	// resource is held, so the new front waiter waits for a wake-up before trying.
	taken bool
}

func newHub(client redis.UniversalClient, enabled, counted bool) *hub {
	id, _ := newOwner() // on a broken random source, "" only costs spurious wake-ups
	h := &hub{
		id: id, client: client, enabled: enabled, done: make(chan struct{}),
		queues: make(map[string]*queue), courtesy: make(map[string]time.Time),
	}
	h.handOff.Store(enabled && counted)
	return h
}

// channelFor returns the channel a release publishes on, or "" when nobody can subscribe.
func (h *hub) channelFor(k keys) string {
	if !h.enabled {
		return ""
	}
	return k.channel
}

func (h *hub) isClosed() bool { return h.closed.Load() }

// maxCourtesy caps how long a Locker stands back after releasing to other processes' waiters.
const maxCourtesy = 20 * time.Millisecond

// released records a release by this Locker: it wakes the front local waiter, and when the
// release message reached subscribers of other Lockers (processes) it lets them go first.
// Without that, the releasing process, whose next attempt needs no message hop, would win
// the lock again and again while remote waiters starve. For twice the release's round trip,
// this Locker's next Acquire of the resource queues instead of trying at once.
func (h *hub) released(ch string, listeners int, rtt time.Duration) {
	h.wake(ch, false)
	if listeners <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.queues[ch] != nil {
		listeners-- // our own subscription
	}
	if listeners <= 0 {
		return
	}
	now := time.Now()
	if len(h.courtesy) > 1024 {
		for c, until := range h.courtesy {
			if now.After(until) {
				delete(h.courtesy, c)
			}
		}
	}
	h.courtesy[ch] = now.Add(min(2*rtt, maxCourtesy))
	h.nc.Store(int32(len(h.courtesy)))
}

// queued reports whether this Locker's next Acquire of the channel's resource should queue
// rather than try at once: it has waiters for it, or it just handed it to another process.
// It returns how long to stand back in the second case.
func (h *hub) queued(ch string) (bool, time.Duration) {
	if h.nq.Load() == 0 && h.nc.Load() == 0 {
		return false, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.queues[ch] != nil {
		return true, 0
	}
	if until, ok := h.courtesy[ch]; ok {
		delete(h.courtesy, ch)
		h.nc.Store(int32(len(h.courtesy)))
		if d := time.Until(until); d > 0 {
			return true, d
		}
	}
	return false, 0
}

// join appends a waiter to the channel's queue, subscribing when the queue is new.
func (h *hub) join(ctx context.Context, ch string, cfg *config) (*queue, *waiter, error) {
	w := &waiter{cfg: cfg, turn: make(chan struct{}), wake: make(chan struct{}, 1), grant: make(chan *Lock, 1)}
	h.mu.Lock()
	if h.closed.Load() {
		h.mu.Unlock()
		return nil, nil, ErrClosed
	}
	q := h.queues[ch]
	created := q == nil
	if created {
		q = &queue{ready: make(chan struct{})}
		h.queues[ch] = q
		h.nq.Add(1)
	}
	q.waiters = append(q.waiters, w)
	if len(q.waiters) == 1 {
		close(w.turn)
	}
	h.mu.Unlock()
	if created && h.enabled {
		h.subscribe(ctx, ch)
	}
	return q, w, nil
}

// leave removes a waiter; the next one in line gets its turn. The last one out unsubscribes.
// A lock handed to the waiter that it did not take (its context ended meanwhile) is
// released, which hands it on to the next waiter or wakes it.
func (h *hub) leave(ch string, q *queue, w *waiter, acquired bool) {
	h.mu.Lock()
	i := slices.Index(q.waiters, w)
	q.waiters = slices.Delete(q.waiters, i, i+1)
	// Deliveries happen under h.mu to a queued waiter only, so none can follow this.
	var handed *Lock
	select {
	case handed = <-w.grant:
	default:
	}
	if i == 0 && len(q.waiters) > 0 {
		q.waiters[0].taken = acquired || handed != nil
		close(q.waiters[0].turn)
	}
	empty := len(q.waiters) == 0
	if empty && h.queues[ch] == q {
		delete(h.queues, ch)
		h.nq.Add(-1)
	}
	h.mu.Unlock()
	if handed != nil {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		_ = handed.Release(ctx)
		cancel()
	}
	if empty && h.enabled {
		h.unsubscribe(ch)
	}
}

// subscribe adds ch to the shared subscription, creating it on first use. Errors are left
// to the back-off: the waiter then polls.
func (h *hub) subscribe(ctx context.Context, ch string) {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	h.mu.Lock()
	if h.closed.Load() || h.queues[ch] == nil {
		h.mu.Unlock()
		return
	}
	if h.ps == nil {
		// Classic PUBLISH reaches subscribers on every node of a Redis Cluster, so one
		// connection to any node hears every resource's releases.
		h.ps = h.client.Subscribe(context.WithoutCancel(ctx))
		h.readerDone = make(chan struct{})
		go h.read(h.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024)), h.readerDone)
	}
	ps := h.ps
	h.mu.Unlock()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = ps.Subscribe(sctx, ch)
}

// unsubscribe drops ch unless a new queue for it appeared meanwhile.
func (h *hub) unsubscribe(ch string) {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	h.mu.Lock()
	ps, again := h.ps, h.queues[ch] != nil
	h.mu.Unlock()
	if ps == nil || again || h.closed.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = ps.Unsubscribe(ctx, ch)
}

// read dispatches subscription confirmations and release messages until the PubSub closes.
// go-redis reconnects and resubscribes by itself; a confirmation that arrives for a queue
// already subscribed means the connection was re-established and a message may have been
// lost, so it wakes the front waiter too.
func (h *hub) read(msgs <-chan any, done chan<- struct{}) {
	defer close(done)
	for m := range msgs {
		var ch string
		switch m := m.(type) {
		case *redis.Message:
			if m.Payload == h.id {
				continue // our own release: its waiter was woken directly
			}
			ch = m.Channel
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			ch = m.Channel
		default:
			continue
		}
		h.wake(ch, true)
	}
}

// wake signals the front waiter of ch's queue, if any; subscribed marks the queue's
// subscription as confirmed.
func (h *hub) wake(ch string, subscribed bool) {
	if h.nq.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[ch]
	if q == nil {
		return
	}
	if subscribed && !q.isReady {
		q.isReady = true
		close(q.ready)
	}
	if len(q.waiters) > 0 {
		select {
		case q.waiters[0].wake <- struct{}{}:
		default:
		}
	}
}

// close ends the subscription and wakes every waiter with ErrClosed.
func (h *hub) close() error {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	h.mu.Lock()
	if h.closed.Swap(true) {
		h.mu.Unlock()
		return nil
	}
	close(h.done)
	ps, readerDone := h.ps, h.readerDone
	h.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-readerDone
	return err
}

// wait is Acquire's loop.
func (l *Locker) wait(ctx context.Context, cfg *config, resource string) (*Lock, int, error) {
	k := resourceKeys(cfg.prefix, resource)
	attempts := 0
	parent := ctx
	if cfg.maxWait >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.maxWait)
		defer cancel()
	}
	// The uncontended path: one script, no subscription. Skipped when this Locker already
	// has waiters for the resource, so a newcomer queues behind them.
	queue, standBack := l.hub.queued(k.channel)
	if cfg.maxWait == 0 || !queue {
		attempts++
		lock, holderTTL, err := l.attempt(parent, cfg, resource, k)
		if err != nil || lock != nil {
			return lock, attempts, err
		}
		if cfg.maxWait == 0 {
			return nil, attempts, &busyError{resource: resource, retryAfter: holderTTL}
		}
	}
	q, w, err := l.hub.join(ctx, k.channel, cfg)
	if err != nil {
		return nil, attempts, err
	}
	var lock *Lock
	defer func() { l.hub.leave(k.channel, q, w, lock != nil) }()

	var busy time.Duration
	ended := func() error {
		b := &busyError{resource: resource, retryAfter: busy}
		switch {
		case l.hub.isClosed():
			return ErrClosed
		case parent.Err() != nil:
			return errors.Join(b, parent.Err())
		}
		return b // WithMaxWait ran out
	}
	select {
	case <-w.turn:
	case <-ctx.Done():
		return nil, attempts, ended()
	case <-l.hub.done:
		return nil, attempts, ended()
	}
	// take returns a lock handed over by a release of this Locker, unless the caller's
	// context has ended: the deferred leave then releases it.
	take := func(handed *Lock) (*Lock, int, error) {
		if parent.Err() != nil {
			w.grant <- handed // for leave; empty, as only this waiter's lock could be handed on
			return nil, attempts, ended()
		}
		lock = handed
		return lock, attempts, nil
	}
	if l.hub.enabled {
		// Attempt only once release messages can reach us, or a release between the
		// attempt and the subscription would go unnoticed until the back-off.
		t := time.NewTimer(cfg.retryMin)
		select {
		case <-q.ready:
		case <-t.C:
		case <-ctx.Done():
		case <-l.hub.done:
		}
		t.Stop()
	}
	if standBack > 0 {
		t := time.NewTimer(standBack)
		select {
		case handed := <-w.grant:
			t.Stop()
			return take(handed)
		case <-w.wake:
		case <-t.C:
		case <-ctx.Done():
		case <-l.hub.done:
		}
		t.Stop()
	}
	backoff := cfg.retryMin
	// A waiter that took over from one that left with the lock waits for a wake-up first.
	try := !w.taken
	for {
		if ctx.Err() != nil || l.hub.isClosed() {
			return nil, attempts, ended()
		}
		select {
		case handed := <-w.grant:
			return take(handed)
		default:
		}
		if try {
			attempts++
			var holderTTL time.Duration
			lock, holderTTL, err = l.attempt(parent, cfg, resource, k)
			if err != nil || lock != nil {
				return lock, attempts, err
			}
			busy = holderTTL
		}
		try = true
		d := jitter(backoff)
		if busy > 0 && busy < d {
			d = busy + time.Millisecond // Redis expires keys at millisecond precision
		}
		backoff = min(2*backoff, cfg.retryMax)
		t := time.NewTimer(d)
		select {
		case handed := <-w.grant:
			t.Stop()
			return take(handed)
		case <-w.wake:
			backoff = cfg.retryMin
		case <-t.C:
		case <-ctx.Done():
		case <-l.hub.done:
		}
		t.Stop()
	}
}

// jitter returns d ±20%.
func jitter(d time.Duration) time.Duration {
	return d - d/5 + time.Duration(rand.Int64N(int64(2*d/5)+1))
}
