package fencing

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Notifications. The release script announces each grant on the resource's channel (see
// grant.lua); a Locker's notifier keeps it subscribed to the channels its waiters wait on and
// hands every announcement to the waiting code (wait.go), which never learns what kind of
// client it has. A route says where a channel is heard:
//
//   - a single server (a *redis.Client, also from NewFailoverClient, and miniredis): one
//     connection with SUBSCRIBE for every channel;
//   - a Cluster: sharded pub/sub, SSUBSCRIBE on the primary that owns the channel's slot, one
//     connection per primary whatever the number of channels.
//
// Each channel is subscribed with a command of its own, so no command spans slots. A
// connection is never repaired, only replaced: go-redis's PubSub resubscribes all of its
// shard channels in one SSUBSCRIBE after it reconnects, which Redis refuses with CROSSSLOT
// when they span slots (redis/go-redis#3133). So on any doubt (an error, no PONG, a channel
// that the server unsubscribed because its slot moved) the notifier closes the connection,
// reloads the slot map and subscribes each channel again on its current owner. Every
// subscription the server confirms makes the channel's waiters check with Redis, since an
// announcement may have been lost in between.
//
// One goroutine (run) owns the tables and sends every subscription command; each connection
// has a reader goroutine.

const (
	// pingEvery is how long a connection may stay silent before it is pinged; three silent
	// periods in a row mean it is dead.
	pingEvery = time.Second
	// checkEvery is how often the notifier compares its connections with the slot map.
	checkEvery = 20 * time.Second
	// commandTimeout bounds each subscription command and slot map reload.
	commandTimeout = 2 * time.Second
	// retryMaxDelay caps the back-off between attempts to subscribe after failures.
	retryMaxDelay = 5 * time.Second
)

// A route tells a notifier where a channel's announcements are heard.
type route interface {
	// owner returns the address of the server that carries ch, and a function that opens an
	// unconnected PubSub on it.
	owner(ctx context.Context, ch string) (addr string, open func() *redis.PubSub, err error)
	subscribe(ctx context.Context, ps *redis.PubSub, ch string) error
	unsubscribe(ctx context.Context, ps *redis.PubSub, ch string) error
	// refresh reloads the slot map.
	refresh(ctx context.Context)
}

// serverRoute is a single server: every channel on one connection.
type serverRoute struct{ c redis.UniversalClient }

func (r serverRoute) owner(ctx context.Context, _ string) (string, func() *redis.PubSub, error) {
	return "", func() *redis.PubSub { return r.c.Subscribe(ctx) }, nil
}

func (serverRoute) subscribe(ctx context.Context, ps *redis.PubSub, ch string) error {
	return ps.Subscribe(ctx, ch)
}

func (serverRoute) unsubscribe(ctx context.Context, ps *redis.PubSub, ch string) error {
	return ps.Unsubscribe(ctx, ch)
}

func (serverRoute) refresh(context.Context) {}

// clusterRoute is a Cluster: a channel is heard on the primary that owns its slot, through a
// PubSub of go-redis's client for that node (which always dials that node's address).
type clusterRoute struct{ c *redis.ClusterClient }

func (r clusterRoute) owner(ctx context.Context, ch string) (string, func() *redis.PubSub, error) {
	node, err := r.c.MasterForKey(ctx, ch)
	if err != nil {
		return "", nil, err
	}
	return node.Options().Addr, func() *redis.PubSub { return node.SSubscribe(ctx) }, nil
}

func (clusterRoute) subscribe(ctx context.Context, ps *redis.PubSub, ch string) error {
	return ps.SSubscribe(ctx, ch)
}

func (clusterRoute) unsubscribe(ctx context.Context, ps *redis.PubSub, ch string) error {
	return ps.SUnsubscribe(ctx, ch)
}

// refresh reloads go-redis's slot map at once: ForEachMaster reloads it before it calls
// anything (ReloadState only schedules a reload).
func (r clusterRoute) refresh(ctx context.Context) {
	_ = r.c.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil })
}

// notifier keeps a Locker subscribed to the channels its waiters wait on.
type notifier struct {
	route route
	heard func(ch, payload string) // an announcement arrived
	ready func(ch string)          // the server confirmed a subscription to ch

	mu      sync.Mutex
	ops     []noteOp
	started bool
	closed  bool
	wake    chan struct{} // capacity 1: ops are waiting
	done    chan struct{} // closed by close
	ended   chan struct{} // closed when run returns
	readers sync.WaitGroup
	fails   atomic.Int32 // connections lost in a row, for the back-off

	// Owned by run.
	chans map[string]*feed // the channels listened to, and the connection of each (nil: none yet)
	feeds map[string]*feed // by address
}

// feed is one pub/sub connection.
type feed struct {
	addr  string
	ps    *redis.PubSub
	chans int         // channels subscribed on it
	gone  atomic.Bool // closed by the notifier
}

// noteOp is work for run.
type noteOp struct {
	kind opKind
	ch   string
	f    *feed
}

type opKind int

const (
	opListen   opKind = iota // subscribe to ch
	opUnlisten               // unsubscribe from ch
	opBroken                 // f failed: replace it
	opDropped                // the server unsubscribed f from ch
	opCheck                  // compare the connections with the slot map
)

func newNotifier(r route, heard func(ch, payload string), ready func(ch string)) *notifier {
	return &notifier{
		route: r, heard: heard, ready: ready,
		wake: make(chan struct{}, 1), done: make(chan struct{}), ended: make(chan struct{}),
		chans: map[string]*feed{}, feeds: map[string]*feed{},
	}
}

// listen subscribes to ch; ready(ch) follows once the server confirms it.
func (n *notifier) listen(ch string) { n.post(noteOp{kind: opListen, ch: ch}) }

// unlisten unsubscribes from ch.
func (n *notifier) unlisten(ch string) { n.post(noteOp{kind: opUnlisten, ch: ch}) }

// post queues o for run, starting run on first use.
func (n *notifier) post(o noteOp) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.ops = append(n.ops, o)
	if !n.started {
		n.started = true
		go n.run()
	}
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// close ends every subscription and waits for the notifier's goroutines.
func (n *notifier) close() {
	n.mu.Lock()
	started, already := n.started, n.closed
	n.closed = true
	n.mu.Unlock()
	if !started || already {
		return
	}
	close(n.done)
	<-n.ended
	n.readers.Wait()
}

// run applies the queued work until close.
func (n *notifier) run() {
	defer close(n.ended)
	check := time.NewTicker(checkEvery)
	defer check.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	retrying := false // retry is set
	// After a slot moved, the node that reports the slot map may not know yet: check again
	// a few times, a second apart.
	again := time.NewTimer(time.Hour)
	again.Stop()
	followUps := 0
	for {
		recheck := false
		select {
		case <-n.done:
			for _, f := range n.feeds {
				n.drop(f)
			}
			return
		case <-n.wake:
		case <-check.C:
			recheck = len(n.chans) > 0
		case <-retry.C:
			retrying = false
			recheck, followUps = true, 3
			again.Reset(time.Second)
		case <-again.C:
			recheck = true
			if followUps--; followUps > 0 {
				again.Reset(time.Second)
			}
		}
		n.mu.Lock()
		ops := n.ops
		n.ops = nil
		n.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		for _, o := range ops {
			if n.apply(ctx, o) {
				recheck, followUps = true, 3
				again.Reset(time.Second)
			}
		}
		if recheck {
			n.route.refresh(ctx)
			for ch, f := range n.chans {
				if addr, _, err := n.route.owner(ctx, ch); err != nil || f == nil || f.addr != addr {
					n.move(ctx, ch)
				}
			}
		}
		cancel()
		if !retrying && n.homeless() {
			// Homeless channels: try again after a back-off that grows with failures.
			retry.Reset(min(10*time.Millisecond<<min(n.fails.Load(), 10), retryMaxDelay))
			retrying = true
		}
	}
}

// homeless reports whether a channel listened to has no connection.
func (n *notifier) homeless() bool {
	for _, f := range n.chans {
		if f == nil {
			return true
		}
	}
	return false
}

// apply does one piece of work and reports whether the connections must be checked against
// the slot map.
func (n *notifier) apply(ctx context.Context, o noteOp) bool {
	switch o.kind {
	case opListen:
		if _, ok := n.chans[o.ch]; !ok {
			n.chans[o.ch] = nil
			n.home(ctx, o.ch)
		}
	case opUnlisten:
		f, ok := n.chans[o.ch]
		delete(n.chans, o.ch)
		if ok && f != nil {
			n.detach(ctx, f, o.ch)
		}
	case opBroken:
		// Its channels are subscribed again after a back-off (see run), so that a server
		// that keeps refusing is not asked in a loop.
		n.fails.Add(1)
		if n.feeds[o.f.addr] == o.f {
			n.drop(o.f)
		}
	case opDropped:
		// Unless it answers an unsubscribe of ours, the slot moved (resharding, failover).
		if f, ok := n.chans[o.ch]; ok && f == o.f {
			n.chans[o.ch] = nil
			if f.chans--; f.chans == 0 {
				n.drop(f)
			}
			return true
		}
	case opCheck:
		return true
	}
	return false
}

// home subscribes to ch on its owner's connection, opening it if needed. On failure ch stays
// homeless, and run tries again later.
func (n *notifier) home(ctx context.Context, ch string) {
	addr, open, err := n.route.owner(ctx, ch)
	if err != nil {
		return
	}
	f := n.feeds[addr]
	fresh := f == nil
	if fresh {
		f = &feed{addr: addr, ps: open()}
		n.feeds[addr] = f
	}
	if err := n.route.subscribe(ctx, f.ps, ch); err != nil {
		n.drop(f)
		return
	}
	n.chans[ch] = f
	f.chans++
	if fresh {
		n.readers.Add(1)
		go n.read(f)
	}
}

// move subscribes to ch on its current owner, leaving the connection it was on.
func (n *notifier) move(ctx context.Context, ch string) {
	if f := n.chans[ch]; f != nil {
		n.chans[ch] = nil
		n.detach(ctx, f, ch)
	}
	n.home(ctx, ch)
}

// detach unsubscribes f from ch, closing f when it carries nothing else. An error reply (the
// slot has moved) is of no consequence.
func (n *notifier) detach(ctx context.Context, f *feed, ch string) {
	if f.chans--; f.chans == 0 {
		n.drop(f)
		return
	}
	_ = n.route.unsubscribe(ctx, f.ps, ch)
}

// drop closes f; its channels become homeless.
func (n *notifier) drop(f *feed) {
	if n.feeds[f.addr] == f {
		delete(n.feeds, f.addr)
	}
	for ch, g := range n.chans {
		if g == f {
			n.chans[ch] = nil
		}
	}
	f.gone.Store(true)
	_ = f.ps.Close()
}

// read hands f's announcements and confirmations on until f is closed, and reports a
// connection in doubt to run: any error that is not a timeout answered by a PONG, including
// error replies (MOVED to a subscription whose slot moved, CROSSSLOT from go-redis's own
// resubscription).
func (n *notifier) read(f *feed) {
	defer n.readers.Done()
	ctx := context.Background()
	silent := 0
	for {
		msg, err := f.ps.ReceiveTimeout(ctx, pingEvery)
		if f.gone.Load() {
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && silent < 2 {
				silent++
				if f.ps.Ping(ctx) == nil {
					continue
				}
			}
			n.post(noteOp{kind: opBroken, f: f})
			return
		}
		silent = 0
		switch m := msg.(type) {
		case *redis.Message:
			n.heard(m.Channel, m.Payload)
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				n.fails.Store(0)
				n.ready(m.Channel)
			case "unsubscribe", "sunsubscribe":
				n.post(noteOp{kind: opDropped, ch: m.Channel, f: f})
			}
		}
	}
}
