package fencing

import (
	"context"
	"errors"
	"io"
	mrand "math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/topology"
)

// Notifications (docs/waiting.md, "Notifications"): a room's notifier keeps it subscribed to its
// waiters' channels, one command each, replacing a connection in doubt (redis/go-redis#3133); one
// goroutine (run) owns the tables and sends every command, and each connection has a reader.

const (
	pingEvery      = time.Second      // a silent connection is pinged; silent three times: dead
	checkEvery     = 20 * time.Second // how often the connections are compared with the slot map
	commandTimeout = 2 * time.Second  // bounds each subscription command and slot map reload
	retryMaxDelay  = 5 * time.Second  // caps the back-off between attempts after failures
	opsQueued      = 4096             // work waiting for run before post blocks (until run catches up)
)

// A route tells a notifier where a channel is heard.
type route interface {
	// owner returns the address of the server of ch, and how to open a PubSub on it.
	owner(ctx context.Context, ch string) (addr string, open func() *redis.PubSub, err error)
	// subscribe subscribes ps to ch, or unsubscribes it when on is false.
	subscribe(ctx context.Context, ps *redis.PubSub, ch string, on bool) error
	// refresh reloads the slot map.
	refresh(ctx context.Context)
}

// serverRoute is a single server: every channel on one connection.
type serverRoute struct{ c redis.UniversalClient }

func (r serverRoute) owner(ctx context.Context, _ string) (string, func() *redis.PubSub, error) {
	return "", func() *redis.PubSub { return r.c.Subscribe(ctx) }, nil
}

func (serverRoute) subscribe(ctx context.Context, ps *redis.PubSub, ch string, on bool) error {
	if on {
		return ps.Subscribe(ctx, ch)
	}
	return ps.Unsubscribe(ctx, ch)
}

func (serverRoute) refresh(context.Context) {}

// clusterRoute is a Cluster: a channel is heard on its slot's primary, via go-redis's node client.
type clusterRoute struct{ topo topology.Topology }

func (r clusterRoute) owner(ctx context.Context, ch string) (string, func() *redis.PubSub, error) {
	node, err := r.topo.ClusterClient().MasterForKey(ctx, ch)
	if err != nil {
		return "", nil, err
	}
	return node.Options().Addr, func() *redis.PubSub { return node.SSubscribe(ctx) }, nil
}

func (clusterRoute) subscribe(ctx context.Context, ps *redis.PubSub, ch string, on bool) error {
	if on {
		return ps.SSubscribe(ctx, ch)
	}
	return ps.SUnsubscribe(ctx, ch)
}

func (r clusterRoute) refresh(ctx context.Context) { r.topo.Refresh(ctx) }

// notifier keeps a Locker subscribed to the channels its waiters wait on.
type notifier struct {
	route route
	to    *room // told of each announcement and confirmed subscription, from the readers

	ops     chan func(context.Context) // work for run
	start   sync.Once                  // starts run on first use
	done    chan struct{}              // closed by close
	ended   chan struct{}              // closed when run returns
	readers sync.WaitGroup
	fails   atomic.Int32 // failures since the last confirmed subscription
	retry   backoff      // its after(fails) spaces the checks while channels are homeless

	// Owned by run.
	chans   map[string]*feed // the channels listened to, and the connection of each (nil: none yet)
	feeds   map[string]*feed // by address
	checked time.Time        // when the connections were last compared with the slot map
	moved   time.Time        // when a slot the notifier listens on last moved
}

// feed is one pub/sub connection.
type feed struct {
	addr  string
	ps    *redis.PubSub
	chans int         // channels subscribed on it
	gone  atomic.Bool // closed by the notifier
}

func newNotifier(r route, to *room) *notifier {
	return &notifier{route: r, to: to, retry: newBackoff(10*time.Millisecond, retryMaxDelay), checked: time.Now(),
		ops: make(chan func(context.Context), opsQueued), done: make(chan struct{}), ended: make(chan struct{}),
		chans: map[string]*feed{}, feeds: map[string]*feed{}}
}

// listen subscribes to ch (the room's subscribed follows), or with on false unsubscribes.
func (n *notifier) listen(ch string, on bool) {
	n.post(func(ctx context.Context) {
		switch f, ok := n.chans[ch]; {
		case on && !ok:
			n.chans[ch] = nil
			n.home(ctx, ch)
		case !on && ok:
			delete(n.chans, ch)
			if f != nil {
				n.detach(ctx, f, ch)
			}
		}
	})
}

// post queues op for run, starting run on first use.
func (n *notifier) post(op func(context.Context)) {
	n.start.Do(func() { go n.run() })
	select {
	case n.ops <- op:
	case <-n.done:
	}
}

// close ends every subscription and waits for the notifier's goroutines. It is called once.
func (n *notifier) close() {
	n.start.Do(func() { close(n.ended) }) // run never started: nothing to wait for
	close(n.done)
	<-n.ended
	n.readers.Wait()
}

// run does the queued work until close, and compares the connections with the slot map every
// checkEvery, each second for 3s after a slot moved, and while channels are homeless after a
// back-off that grows with failures.
func (n *notifier) run() {
	defer close(n.ended)
	timer := time.NewTimer(checkEvery)
	defer timer.Stop()
	for {
		wait := checkEvery
		if time.Since(n.moved) < 3*time.Second {
			wait = time.Second
		}
		if n.homeless() {
			wait = min(wait, n.retry.after(int(n.fails.Load())))
		}
		timer.Reset(time.Until(n.checked.Add(wait)))
		var op func(context.Context)
		select {
		case <-n.done:
			for _, f := range n.feeds {
				n.drop(f)
			}
			return
		case op = <-n.ops:
		case <-timer.C:
			op = n.check
		}
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		op(ctx)
		cancel()
	}
}

// check compares the connections with the slot map and moves channels to their owners.
func (n *notifier) check(ctx context.Context) {
	n.checked = time.Now()
	if len(n.chans) > 0 {
		n.route.refresh(ctx)
		for ch := range n.chans {
			n.home(ctx, ch)
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

// home moves ch to its owner's connection, opening it if needed; on failure run tries again.
func (n *notifier) home(ctx context.Context, ch string) {
	addr, open, err := n.route.owner(ctx, ch)
	f := n.chans[ch]
	if err != nil || f != nil && f.addr == addr {
		return
	}
	if f != nil {
		n.chans[ch] = nil
		n.detach(ctx, f, ch)
	}
	f = n.feeds[addr]
	fresh := f == nil
	if fresh {
		f = &feed{addr: addr, ps: open()}
		n.feeds[addr] = f
	}
	if err := n.route.subscribe(ctx, f.ps, ch, true); err != nil {
		n.fails.Add(1)
		n.drop(f)
		return
	}
	n.chans[ch], f.chans = f, f.chans+1
	if fresh {
		n.readers.Add(1)
		go n.read(f)
	}
}

// detach unsubscribes f from ch (an error reply is of no consequence), or closes f when empty.
func (n *notifier) detach(ctx context.Context, f *feed, ch string) {
	if f.chans--; f.chans == 0 {
		n.drop(f)
		return
	}
	_ = n.route.subscribe(ctx, f.ps, ch, false)
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

// read hands f's messages on until f is closed, and sends back to run a connection in doubt, to
// be replaced: any error but a timeout answered by a PONG, or a channel the server unsubscribed.
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
			n.fails.Add(1) // its channels are homed again after a back-off (see run)
			n.post(func(context.Context) { n.drop(f) })
			return
		}
		silent = 0
		switch m := msg.(type) {
		case *redis.Message:
			n.to.heard(m.Channel, m.Payload)
		case *redis.Subscription:
			switch ch := m.Channel; m.Kind {
			case "subscribe", "ssubscribe":
				n.fails.Store(0)
				n.to.subscribed(ch)
			case "unsubscribe", "sunsubscribe":
				n.post(func(ctx context.Context) {
					if n.chans[ch] == f { // not an answer to run's own unsubscribe: the slot moved
						n.moved = time.Now()
						n.drop(f)
						n.check(ctx)
					}
				})
			}
		}
	}
}

// passing reports whether err can pass by itself: the connection failed or timed out, or the
// server cannot serve the call yet (loading its data, a replica promoted or a primary demoted,
// the cluster or the primary down, a slot moving, another script running, too many clients).
func passing(err error) bool {
	var ne net.Error
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, redis.ErrPoolTimeout) || redis.IsLoadingError(err) || redis.IsReadOnlyError(err) ||
		redis.IsClusterDownError(err) || redis.IsTryAgainError(err) || redis.IsMasterDownError(err) ||
		redis.IsMaxClientsError(err) || redis.HasErrorPrefix(err, "BUSY ") || moved || ask
}

// backoff is the delay between failed attempts, or polls: from first, doubling up to most.
type backoff struct{ next, first, most time.Duration }

func newBackoff(first, most time.Duration) backoff {
	return backoff{next: first, first: first, most: most}
}

// step returns the delay before the next attempt and doubles the one after it.
func (b *backoff) step() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.most)
	return d
}

// after returns the delay after n failures in a row, counted elsewhere.
func (b backoff) after(n int) time.Duration {
	return min(b.first<<min(max(n, 0), 30), b.most)
}

// jitter returns d ±20%.
func jitter(d time.Duration) time.Duration {
	return d - d/5 + time.Duration(mrand.Int64N(int64(2*d/5)+1))
}
