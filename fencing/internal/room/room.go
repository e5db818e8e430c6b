// Package room is a Locker's waiting room (see docs/waiting.md): its calls' places in the
// queues that Redis keeps beside each resource's lock, the announcements of grants that reach
// them, and their checks with Redis while none come. A Locker makes one Room; an Acquire that
// finds its resource busy calls Room.Wait, which returns the grant; nothing else of the
// package is the Locker's concern, but for the grants that the Locker's own releases reveal
// (Room.Granted) and what they saw (Room.Saw).
//
// A waiter that finds the resource busy joins its queue, one element per waiter (see
// wire.Element), through the acquire script that the call gives the room (Call.Join). The
// release script grants the lock to the head element with a new token and the element's
// lease, and announces "<element>:<token>" on the channel of the resource and the element's
// Locker alone (to the releasing Locker itself, in its reply): the waiter returns without
// another round trip (a lease shorter than its TTL is extended by the Locker later). The
// room's waiter key per resource ("w:<id>") marks its elements alive; its longest-waiting
// waiter there polls every PollEvery (the poll script) to renew the key, put back dropped
// elements and find a grant whose announcement was lost or a lease that ran out.
package room

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing/internal/backoff"
	"github.com/fencekit/fencekit/internal/topology"
	"github.com/fencekit/fencekit/internal/wire"
)

const (
	// PollEvery is how far apart, at most (less jitter), the front waiter of a room checks
	// with Redis when no announcement arrives; it renews the waiter key well within
	// wire.EntryTTL.
	PollEvery = time.Second
	// GrantLease is the longest lease of a grant from the queue. A waiter process that dies
	// with a grant on its way holds the resource up for GrantLease and a round trip (the
	// next waiter checks as the lease ends); one that dies before, for at most
	// wire.EntryTTL.
	GrantLease = 3 * time.Second
	// renewAfter is how long after a write of the room's waiter key and the queue's TTL a
	// join need not write them again: a waiter that joins then polls, at most 1.2 PollEvery
	// later, before they run out.
	renewAfter = wire.EntryTTL - 3*PollEvery/2
	// OutageWait is how long a queued waiter goes on checking with Redis while every check
	// fails with an error that can pass (see Passing): long enough for a restart, a
	// Cluster's failover with the default cluster-node-timeout (15s) and the CLUSTERDOWN of a
	// primary that rejoins.
	OutageWait = 30 * time.Second
	// subscribePatience is how long a waiter that starts listening waits for the
	// subscription to be confirmed before it joins the queue (a grant announced before is
	// not heard; the front waiter's checks catch it).
	subscribePatience = 50 * time.Millisecond
	// releaseTimeout bounds the releases the room makes on its own (a grant no waiter takes).
	releaseTimeout = 5 * time.Second
)

// A Room is one Locker's waiting calls. It is safe for concurrent use.
type Room struct {
	id      string
	client  redis.UniversalClient
	publish string        // how the scripts announce grants (topology.Publish)
	outage  time.Duration // OutageWait; shorter in tests
	poll    [2]time.Duration
	notes   *notifier // nil when waiters poll
	done    <-chan struct{}
	seq     atomic.Uint64 // numbers the elements

	mu    sync.Mutex       // guards lines
	lines map[string]*line // by channel
}

// Config is what New needs.
type Config struct {
	Client redis.UniversalClient
	Topo   topology.Topology
	// PollMin and PollMax bound how often a queued waiter checks with Redis while no
	// announcement can come (fencing.WithRetryBackoff).
	PollMin, PollMax time.Duration
	// Listen makes the room subscribe to the grants' channels; without it (a Locker that
	// cannot be used, a Ring) waiters poll.
	Listen bool
	// Done is closed when the Locker closes: every wait ends.
	Done <-chan struct{}
}

// New returns the room of one Locker.
func New(cfg Config) *Room {
	r := &Room{
		id: newID(), client: cfg.Client, publish: cfg.Topo.Publish(), outage: OutageWait,
		poll: [2]time.Duration{cfg.PollMin, cfg.PollMax}, done: cfg.Done, lines: map[string]*line{},
	}
	if !cfg.Listen {
		return r
	}
	switch cfg.Topo.Kind {
	case topology.Cluster:
		r.notes = newNotifier(clusterRoute{cfg.Topo}, r)
	case topology.Server:
		r.notes = newNotifier(serverRoute{cfg.Client}, r)
	}
	return r
}

// newID returns 16 random bytes as unpadded base64url: 22 characters, never ':' or '.'. On
// a broken random source it returns "", which still works within one room.
func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ID returns the room's id in the Redis queues: its Locker's.
func (r *Room) ID() string { return r.id }

// SetOutage sets how long waiters go on through errors that can pass; tests call it first.
func (r *Room) SetOutage(d time.Duration) { r.outage = d }

// Close ends the subscriptions and waits for the notifier's goroutines; the Locker has
// closed Done, which wakes every waiter.
func (r *Room) Close() {
	r.mu.Lock()
	for _, ln := range r.lines {
		ln.mu.Lock()
		if ln.linger != nil {
			ln.linger.Stop()
		}
		ln.mu.Unlock()
	}
	r.mu.Unlock()
	if r.notes != nil {
		r.notes.close()
	}
}

// A Call is one call that waits.
type Call struct {
	Keys wire.Keys
	Kind wire.Kind
	// TTL is the lease the call asks for; a grant's lease is the TTL, at most GrantLease.
	TTL time.Duration
	// Floor and Expiry are the rules of the call's tokens, which its grant follows
	// (wire.Element).
	Floor  bool
	Expiry time.Duration
	// Label is the call's label (wire.Labeled), in its element.
	Label string
	// Join sends the acquire script with the waiter's element elem and the room's waiter
	// value entry ("" when the waiter key and the queue's TTL are known to be fresh): it
	// takes the resource when it is free and nobody waits, or queues elem.
	Join func(ctx context.Context, elem, entry string) (Joined, error)
	// Left is how long the holders' lease had left when the call's own attempt came back at
	// Seen, if it made one (Seen zero: it did not).
	Seen time.Time
	Left time.Duration
	// Checked, if not nil, is called before each check with Redis (a poll script).
	Checked func()
}

// Joined is what a Call's Join did.
type Joined struct {
	// Taken is the lock that the script took (Grant.Taken), when it did.
	Taken *Grant
	// Sent is when the script was sent; Held is the exclusive holder's lock value it saw
	// ("" when none), Left how long the holders' lease had left.
	Sent time.Time
	Held string
	Left time.Duration
}

// A Grant is a lock given to a waiting call: granted from the queue, or taken by its Join.
type Grant struct {
	Value  string        // the lock value "<owner>:<token>"
	Token  int64         // the fencing token
	Lease  time.Duration // the lease the grant got
	Start  time.Time     // the lease began after this
	Behind time.Duration // Taken: how far the server clock was behind the last token
	Taken  bool          // taken by the Join script: Value's owner is its own
}

// Ended is Wait's error when the wait ended: ctx, or the Locker closed.
type Ended struct {
	Last  error         // the last error of the checks with Redis, if they were failing
	Ahead int           // waiters ahead in the queue when it left; -1 when unknown
	Left  time.Duration // the holders' lease left when it left; -1 when unknown
}

func (e *Ended) Error() string { return "fencing: wait ended" }

// Listening reports whether the room waits on k's resource with a confirmed subscription.
func (r *Room) Listening(k wire.Keys) bool {
	ln := r.line(k.Channel)
	return ln != nil && ln.subscribed()
}

// QueuedOn reports whether the room has elements queued for k's resource, so that a release
// names it: a grant to one of them comes back in the release's reply.
func (r *Room) QueuedOn(k wire.Keys) bool {
	ln := r.line(k.Channel)
	if ln == nil {
		return false
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return slices.ContainsFunc(ln.waiters, queued)
}

// Wait waits in the queue of c's resource until the resource is granted to the call (the
// Grant), ctx ends or the Locker closes (an *Ended), or a check fails with an error that
// cannot pass, or fails for longer than OutageWait. parent is the call's own context, whose
// end (rather than a bound of the wait itself) also ends a wait for a grant already made.
func (r *Room) Wait(ctx, parent context.Context, c Call) (Grant, error) {
	ln, err := r.enter(ctx, c)
	if err != nil {
		return Grant{}, err
	}
	defer r.exit(ln)
	if !c.Seen.IsZero() && c.Left > 0 {
		ln.leaseSeen(c.Seen, c.Left)
	}
	lease := min(c.TTL, GrantLease)
	elem := wire.Element{Locker: r.id, Seq: r.seq.Add(1), Lease: lease, Floor: c.Floor, Expiry: c.Expiry, Kind: c.Kind, Label: c.Label}
	w := &waiter{ln: ln, kind: c.Kind, elem: elem.String(), lease: lease, grant: make(chan Grant, 1), wake: make(chan struct{}, 1)}
	g, err := r.queue(ctx, parent, c, w)
	if e, ok := err.(*Ended); ok {
		e.Ahead, e.Left = r.leave(w)
	} else {
		r.leave(w)
	}
	return g, err
}

// queue adds w to its line and its element to the Redis queue, and waits for a grant.
func (r *Room) queue(ctx, parent context.Context, c Call, w *waiter) (Grant, error) {
	ln := w.ln
	if g, err := r.join(parent, c, w); err != nil || g.Taken {
		return g, err
	}
	quiet := backoff.New(r.poll[0], r.poll[1]) // polls while no announcement can come
	var failing error                          // see Ended
	var failingSince time.Time
	for {
		d := min(r.poll[1], PollEvery)
		if failing != nil || !ln.subscribed() || r.notes == nil {
			d = min(quiet.Step(), d)
		}
		select {
		case g := <-w.grant:
			if parent.Err() != nil {
				w.grant <- g // for leave, which passes it on
				return Grant{}, &Ended{Last: failing}
			}
			return g, nil
		case <-w.wake:
		case <-time.After(ln.nextPoll(w, backoff.Jitter(d))):
		case <-ctx.Done():
			return Grant{}, &Ended{Last: failing}
		case <-r.done:
			return Grant{}, &Ended{Last: failing}
		}
		if !ln.isFront(w) {
			continue
		}
		if c.Checked != nil {
			c.Checked()
		}
		err := r.check(parent, ln)
		switch {
		case err == nil:
			if parent.Err() == nil { // else the check gave up on its call: keep the last error
				failing = nil
			}
		case !Passing(err) || (failing != nil && time.Since(failingSince) >= r.outage):
			return Grant{}, err
		case failing == nil:
			// Keep the place in the queue: Redis keeps the elements of a room whose key
			// lapsed until a grant reaches them, and the next check that works puts back
			// those dropped.
			failing, failingSince = err, time.Now()
		default:
			failing = err
		}
	}
}

// join adds w to its line and its element to the Redis queue. When the resource is free and
// nobody waits, the acquire script takes it at once, and join returns that lock.
func (r *Room) join(ctx context.Context, c Call, w *waiter) (Grant, error) {
	ln := w.ln
	ln.mu.Lock()
	others := slices.ContainsFunc(ln.waiters, queued)
	ln.waiters = append(ln.waiters, w)
	w.sent = time.Now()
	deaf := !ln.subscribed() // a grant announced before the subscription is confirmed is lost
	entry := ""
	if !w.sent.Before(ln.renewBy) {
		entry = ln.entry()
	}
	ln.mu.Unlock()
	pushed := false
	if others && entry == "" {
		// Other waiters of this room are queued, so the queue exists (their polls keep it
		// alive) and the newcomer cannot be first: append its element.
		n, err := r.client.RPushX(ctx, ln.k.Queue, w.elem).Result()
		pushed = err == nil && n > 0
	}
	var j Joined
	if !pushed {
		var err error
		j, err = c.Join(ctx, w.elem, entry)
		if err != nil {
			var answer redis.Error
			if !errors.As(err, &answer) {
				// The script may have queued the element: leave takes it out again.
				ln.mu.Lock()
				w.joined = true
				ln.mu.Unlock()
			}
			return Grant{}, err
		}
		if j.Taken != nil {
			return *j.Taken, nil
		}
	}
	ln.mu.Lock()
	w.joined = true
	if entry != "" {
		ln.renewBy = j.Sent.Add(renewAfter) // the script wrote the key
	}
	if deaf && ln.subscribed() {
		// Confirmed while this call was on its way: a grant to w may have been announced to
		// nobody, and the front waiter's poll, woken by the confirmation, did not name w.
		ln.wakeFront()
	}
	ln.mu.Unlock()
	if !pushed {
		r.Saw(ln.k, j.Sent, j.Held)
		ln.leaseSeen(time.Now(), j.Left)
	}
	return Grant{}, nil
}

// check runs the poll script for ln: it renews this room's waiter key, puts back its waiters'
// elements that were dropped, and finds a grant whose announcement was lost or a lease that
// ran out.
func (r *Room) check(ctx context.Context, ln *line) error {
	ln.io.Lock()
	defer ln.io.Unlock()
	ln.mu.Lock()
	args := []any{r.id, ln.entry(), r.publish}
	for _, w := range ln.waiters {
		if queued(w) {
			args = append(args, w.elem)
		}
	}
	ln.renewBy = time.Now().Add(renewAfter)
	ln.due = time.Time{}
	ln.mu.Unlock()
	sent := time.Now()
	res, err := wire.Poll.RunOn(ctx, r.client, ln.k, "", args...).Slice()
	if err != nil && ctx.Err() != nil {
		return nil // the caller's context ended: the wait ends with that
	} else if err != nil {
		return err
	}
	p, err := wire.ParsePoll(res)
	switch {
	case err != nil:
		return err
	case p.Code == wire.Layout:
		return ErrLayout
	case p.Code == wire.Granted:
		for _, g := range p.Grants {
			var after time.Time
			if g.Now {
				after = sent // granted by this poll
			}
			r.Granted(ln.k, g.Element, g.Token, after)
		}
	default:
		r.Saw(ln.k, sent, p.Held)
		ln.leaseSeen(time.Now(), time.Duration(p.Left)*time.Millisecond)
	}
	return nil
}

// ErrLayout is the error of a call on a resource whose lock is a hash of the earlier layout,
// which the scripts do not change.
var ErrLayout = errors.New("fencing: the resource's lock is in the key layout of an earlier fencekit version, which this one does not change: finish the rolling deploy (see docs/design.md, \"Rolling deploys\")")

// leave takes w off its line. A grant to w that it did not take is released, which passes it
// on; its element, if still queued, is removed. It waits for a poll in flight, which would
// put back as dropped the element of a grant w took and released meanwhile (a stale element).
// It returns how many waiters were ahead of w's element when it was removed, and how long
// the holders' lease had left then, each -1 when unknown.
func (r *Room) leave(w *waiter) (ahead int, left time.Duration) {
	ln := w.ln
	ln.io.Lock()
	defer ln.io.Unlock()
	ln.mu.Lock()
	ln.waiters = slices.DeleteFunc(ln.waiters, func(x *waiter) bool { return x == w })
	inQueue := queued(w) // no grant is delivered to w from now on
	ln.mu.Unlock()
	ahead, left = -1, -1
	if len(w.grant) > 0 { // nothing is sent to w any more
		r.passOn(ln.k, (<-w.grant).Value, w.kind)
		return ahead, left
	}
	if !inQueue {
		return ahead, left
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	// One round trip: where the element stood (for the error), its removal, and the
	// holders' lease as it stands now.
	var pos, rem *redis.IntCmd
	var pttl *redis.DurationCmd
	var hash *redis.MapStringStringCmd
	_, _ = r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		pos = p.LPos(ctx, ln.k.Queue, w.elem, redis.LPosArgs{})
		rem = p.LRem(ctx, ln.k.Queue, 0, w.elem)
		pttl = p.PTTL(ctx, ln.k.Lock)
		hash = p.HGetAll(ctx, ln.k.Lock) // WRONGTYPE for an exclusive holder's string
		return nil
	})
	if n, err := pos.Result(); err == nil {
		ahead = int(n)
	}
	left = holdersLeft(pttl, hash)
	if n, err := rem.Result(); err == nil && n == 0 {
		// The element was popped: granted to w (the announcement is on its way) or dropped
		// as dead. Free such a grant now.
		r.passOn(ln.k, w.elem+":", w.kind)
	}
	return ahead, left
}

// holdersLeft returns how long the holders' lease has left from the replies of PTTL and
// HGETALL of the lock, read in one round trip: the exclusive holder's (the key's TTL); the
// latest of the live shared holders'; for a limit, the earliest of the live holders' when
// every slot is taken, and 0 when one is free. The time is the hash's expiry t less its TTL,
// as the scripts read it. -1 when unknown.
func holdersLeft(pttl *redis.DurationCmd, hash *redis.MapStringStringCmd) time.Duration {
	d, err := pttl.Result()
	if err != nil || d < 0 {
		return -1
	}
	fields, err := hash.Result()
	if err != nil { // an exclusive holder: a string
		return d
	}
	t, err := strconv.ParseInt(fields["t"], 10, 64)
	if err != nil {
		return -1 // the earlier layout: unknown
	}
	now := time.UnixMilli(t).Add(-d)
	kind, holders, _ := wire.HashHolders(fields)
	var latest, earliest time.Time
	live := 0
	for _, h := range holders {
		if !h.End.After(now) {
			continue
		}
		live++
		if h.End.After(latest) {
			latest = h.End
		}
		if earliest.IsZero() || h.End.Before(earliest) {
			earliest = h.End
		}
	}
	switch {
	case live == 0:
		return 0
	case kind.Shared:
		return latest.Sub(now)
	case live < kind.Limit:
		return 0
	}
	return earliest.Sub(now)
}
