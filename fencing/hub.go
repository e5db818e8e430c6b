package fencing

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// hub is a Locker's side of waiting. The queue itself lives in Redis (see grant.lua and
// wait.go): a release hands the lock to the next waiter and announces it on the resource's
// channel. The hub holds the subscriptions that carry those announcements and routes each to
// the resource's line of local waiters.
//
// A plain client shares one connection for every resource (SUBSCRIBE; the scripts PUBLISH).
// A Cluster client uses sharded pub/sub (SSUBSCRIBE; the scripts SPUBLISH), so a grant
// travels only within the shard that owns the resource's slot; as Redis refuses an
// SSUBSCRIBE whose channels span slots (go-redis resubscribes all of a connection's channels
// in one command), each resource has a connection of its own there. On a Ring nothing is
// subscribed and waiters poll.
type hub struct {
	locker  *Locker
	id      string // random; the Locker's id in the Redis queues
	client  redis.UniversalClient
	publish string // "PUBLISH", "SPUBLISH", or "" when waiters poll
	sharded bool
	// idArg and publishArg are id and publish boxed once, for the scripts' arguments.
	idArg, publishArg any

	closed atomic.Bool
	done   chan struct{} // closed by close
	tasks  sync.WaitGroup

	subMu sync.Mutex // orders subscribe and unsubscribe commands
	mu    sync.Mutex // guards the fields below and every line's state
	subs  map[string]*subscription
	lines map[string]*line // by channel
}

// subscription is one pub/sub connection and its reader.
type subscription struct {
	ps       *redis.PubSub
	channels int
	done     chan struct{} // closed when the reader returns
}

func newHub(l *Locker, usable bool) *hub {
	id, _ := newOwner() // on a broken random source, "" still works within one Locker
	client := l.client
	h := &hub{
		locker: l, id: id, client: client, done: make(chan struct{}),
		subs: make(map[string]*subscription), lines: make(map[string]*line),
	}
	switch client.(type) {
	case *redis.Ring:
	case *redis.ClusterClient:
		h.publish, h.sharded = "SPUBLISH", true
	default:
		h.publish = "PUBLISH"
	}
	if !usable {
		h.publish = ""
	}
	h.idArg, h.publishArg = h.id, h.publish
	return h
}

func (h *hub) isClosed() bool { return h.closed.Load() }

// subKey returns the subscription that carries ch.
func (h *hub) subKey(ch string) string {
	if h.sharded {
		return ch
	}
	return ""
}

// subscribe adds ch to its subscription, creating the subscription on first use. Errors are
// left to polling: the line's waiters then poll until a confirmation arrives.
func (h *hub) subscribe(ctx context.Context, ch string) {
	if h.publish == "" {
		return
	}
	h.subMu.Lock()
	defer h.subMu.Unlock()
	h.mu.Lock()
	if h.closed.Load() || h.lines[ch] == nil {
		h.mu.Unlock()
		return
	}
	key := h.subKey(ch)
	s := h.subs[key]
	if s != nil {
		s.channels++
	}
	h.mu.Unlock()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if s != nil {
		if h.sharded {
			_ = s.ps.SSubscribe(sctx, ch)
		} else {
			_ = s.ps.Subscribe(sctx, ch)
		}
		return
	}
	// Subscribe before the reader starts: a reader that connected first would pick a
	// random node of a Cluster, not the one that owns ch's slot.
	var ps *redis.PubSub
	if h.sharded {
		ps = h.client.(*redis.ClusterClient).SSubscribe(sctx, ch)
	} else {
		ps = h.client.Subscribe(sctx, ch)
	}
	s = &subscription{ps: ps, channels: 1, done: make(chan struct{})}
	h.mu.Lock()
	if h.closed.Load() {
		h.mu.Unlock()
		_ = ps.Close()
		return
	}
	h.subs[key] = s
	h.tasks.Add(1)
	h.mu.Unlock()
	go h.read(s)
}

// unsubscribe drops a dropped line's use of ch from its subscription, closing the
// subscription when it carries nothing else. A new line for ch keeps the channel subscribed.
func (h *hub) unsubscribe(ch string) {
	if h.publish == "" {
		return
	}
	h.subMu.Lock()
	defer h.subMu.Unlock()
	h.mu.Lock()
	key := h.subKey(ch)
	s := h.subs[key]
	if s == nil || h.closed.Load() {
		h.mu.Unlock()
		return
	}
	s.channels--
	last := s.channels == 0
	if last {
		delete(h.subs, key)
	}
	again := h.lines[ch] != nil // a new line for ch subscribed, or is about to
	h.mu.Unlock()
	if last {
		_ = s.ps.Close()
		<-s.done
		return
	}
	if again {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if h.sharded {
		_ = s.ps.SUnsubscribe(ctx, ch)
	} else {
		_ = s.ps.Unsubscribe(ctx, ch)
	}
}

// read dispatches grant messages and subscription confirmations until the PubSub closes.
// go-redis reconnects and resubscribes by itself; a confirmation that arrives for a line
// already subscribed means the connection came back and a message may have been lost, so
// the line's waiters check with Redis.
func (h *hub) read(s *subscription) {
	defer h.tasks.Done()
	defer close(s.done)
	for m := range s.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024)) {
		switch m := m.(type) {
		case *redis.Message:
			id, token, ok := splitValue(m.Payload)
			if ok && id == h.id {
				h.locker.granted(channelKeys(m.Channel), token, time.Time{})
			}
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				h.subscribed(m.Channel)
			}
		}
	}
}

// splitValue splits a lock value "<owner>:<token>".
func splitValue(v string) (owner string, token int64, ok bool) {
	i := strings.LastIndexByte(v, ':')
	if i < 0 {
		return "", 0, false
	}
	token, err := strconv.ParseInt(v[i+1:], 10, 64)
	return v[:i], token, err == nil && token > 0
}

// close ends the subscriptions, wakes every waiter with ErrClosed and waits for the hub's
// goroutines.
func (h *hub) close() error {
	h.subMu.Lock()
	h.mu.Lock()
	if h.closed.Swap(true) {
		h.mu.Unlock()
		h.subMu.Unlock()
		return nil
	}
	close(h.done)
	subs := h.subs
	h.subs = map[string]*subscription{}
	for _, ln := range h.lines {
		if ln.linger != nil {
			ln.linger.Stop()
		}
	}
	h.mu.Unlock()
	h.subMu.Unlock()
	var err error
	for _, s := range subs {
		if cerr := s.ps.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	h.tasks.Wait()
	return err
}

// goTask runs f on a goroutine that close waits for, unless the hub is closed.
func (h *hub) goTask(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed.Load() {
		return
	}
	h.tasks.Add(1)
	go func() {
		defer h.tasks.Done()
		f()
	}()
}
