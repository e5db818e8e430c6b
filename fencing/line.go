package fencing

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/topology"
)

// A Locker's local waiters (see docs/waiting.md): one line per resource it waits on, the
// grants the notifier, the scripts' replies and the polls bring, and the dating of each
// grant's lease. queue.go is what a waiter does with Redis; notify.go is where the
// announcements come from.

// waiting is a Locker's lines of waiters, by resource, and the notifier that brings their
// grants. It is the notifier's listener.
type waiting struct {
	id     string                             // random; the Locker's id in the queues
	outage time.Duration                      // outageWait; shorter in tests
	notes  *notifier                          // nil when waiters poll
	passOn func(k keys, value string, m mode) // releases a grant that no waiter takes
	done   <-chan struct{}                    // the Locker's, closed by Close
	seq    atomic.Uint64                      // numbers the elements

	mu    sync.Mutex       // guards lines
	lines map[string]*line // by channel
}

// line is a Locker's state for one resource it waits on.
type line struct {
	k     keys
	since int64         // when the line was created, in Unix milliseconds (in the waiter key)
	ready chan struct{} // closed once the server confirms the subscription
	io    sync.Mutex    // orders polls and removals of elements

	mu      sync.Mutex          // guards the fields below and the line's waiters
	users   int                 // waiting calls that use the line
	linger  *time.Timer         // drops the line once idle for entryTTL
	limit   int                 // the limit of the calls that use the line; 0: exclusive or shared
	waiters []*waiter           // in arrival order
	renewBy time.Time           // the waiter key needs no write before then
	due     time.Time           // the holders' leases, as last seen, end by then: the front waiter checks
	given   map[int64]time.Time // the tokens delivered lately, and when
	seen    time.Time           // the latest call whose reply showed seenOf, another's token, held:
	seenOf  int64               // any later token was granted after seen
}

type waiter struct {
	ln     *line
	mode   mode          // of its acquisition
	elem   string        // its queue element (see element)
	lease  time.Duration // of a grant to it: its TTL, at most grantLease
	sent   time.Time     // when its element was first sent to Redis: any grant to it came later
	joined bool          // its element is in the Redis queue, unless got
	got    bool          // a grant was delivered to it
	grant  chan grant    // capacity 1
	wake   chan struct{} // capacity 1: check with Redis now
}

// grant is a lock granted to a waiter from the queue.
type grant struct {
	token int64
	value string
	lease time.Duration
	start time.Time // the lease began after this
}

func newWaiting(client redis.UniversalClient, topo topology.Topology, usable bool, passOn func(keys, string, mode), done <-chan struct{}) *waiting {
	id, _ := newOwner() // on a broken random source, "" still works within one Locker
	ws := &waiting{id: id, outage: outageWait, passOn: passOn, done: done, lines: map[string]*line{}}
	if !usable {
		return ws
	}
	switch topo.Kind {
	case topology.Cluster:
		ws.notes = newNotifier(clusterRoute{topo}, ws)
	case topology.Server:
		ws.notes = newNotifier(serverRoute{client}, ws)
	}
	return ws
}

// line returns the line of the resource whose channel is ch, or nil.
func (ws *waiting) line(ch string) *line {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.lines[ch]
}

// enter returns the line for k, creating it and subscribing to its channel when it is new,
// and waits up to patience for the subscription to be confirmed. Exclusive and shared calls
// share a line; a line in use by calls of another limit is an error wrapping ErrInvalid.
func (ws *waiting) enter(ctx context.Context, k keys, m mode, patience time.Duration) (*line, error) {
	limit := 0
	if m.limit > 1 && !m.shared {
		limit = m.limit
	}
	ws.mu.Lock()
	if isDone(ws.done) {
		ws.mu.Unlock()
		return nil, ErrClosed
	}
	ln := ws.lines[k.channel]
	if ln == nil {
		ln = &line{k: k, ready: make(chan struct{}), since: time.Now().UnixMilli(), limit: limit}
		ws.lines[k.channel] = ln
		if ws.notes != nil {
			ws.notes.listen(k.grants(ws.id), true)
		}
	}
	ln.mu.Lock()
	if limit != ln.limit {
		if ln.users > 0 {
			have := mode{limit: ln.limit}
			ln.mu.Unlock()
			ws.mu.Unlock()
			return nil, invalidf("this Locker waits for the resource as %s, this call %s", have, m)
		}
		ln.limit = limit
	}
	ln.users++
	if ln.linger != nil {
		ln.linger.Stop()
		ln.linger = nil
	}
	ln.mu.Unlock()
	ws.mu.Unlock()
	if ws.notes != nil {
		select {
		case <-ln.ready:
		case <-time.After(patience):
		case <-ctx.Done():
		case <-ws.done:
		}
	}
	return ln, nil
}

// exit ends a call's use of ln; the last one out lets it linger for entryTTL, so a Locker
// that waits on the resource again soon keeps its subscription and fresh waiter key.
func (ws *waiting) exit(ln *line) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.users--; ln.users > 0 || isDone(ws.done) {
		return
	}
	ln.linger = time.AfterFunc(entryTTL, func() { ws.drop(ln) })
}

// drop forgets ln and its subscription, unless a call uses it again.
func (ws *waiting) drop(ln *line) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ln.mu.Lock()
	idle := ln.users == 0
	ln.mu.Unlock()
	if idle && ws.lines[ln.k.channel] == ln && !isDone(ws.done) {
		delete(ws.lines, ln.k.channel)
		if ws.notes != nil {
			ws.notes.listen(ln.k.grants(ws.id), false)
		}
	}
}

// close ends the subscriptions and waits for the notifier's goroutines; the Locker has
// closed done, which wakes every waiter.
func (ws *waiting) close() {
	ws.mu.Lock()
	for _, ln := range ws.lines {
		ln.mu.Lock()
		if ln.linger != nil {
			ln.linger.Stop()
		}
		ln.mu.Unlock()
	}
	ws.mu.Unlock()
	if ws.notes != nil {
		ws.notes.close()
	}
}

// heard handles an announcement on one of this Locker's channels: "<element>:<token>".
func (ws *waiting) heard(ch, payload string) {
	k, ok := grantsOf(ch, ws.id)
	if elem, token, ok2 := splitValue(payload); ok && ok2 {
		ws.granted(k, elem, token, time.Time{})
	}
}

// subscribed makes the front waiter of ch's resource check with Redis now: the server has
// just confirmed the subscription, perhaps on a new connection that lost an announcement.
func (ws *waiting) subscribed(ch string) {
	k, ok := grantsOf(ch, ws.id)
	if !ok {
		return
	}
	ln := ws.line(k.channel)
	if ln == nil {
		return
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if !ln.subscribed() {
		close(ln.ready)
	}
	ln.wakeFront()
}

// granted hands a grant addressed to this Locker (announced, or in a release's reply) to its
// waiter, or passes it on when none takes it.
func (ws *waiting) granted(k keys, elem string, token int64, after time.Time) {
	if !ws.deliver(k, elem, token, after) {
		ws.passOn(k, elem+":"+strconv.FormatInt(token, 10), elementMode(elem))
	}
}

// deliver hands the lock granted to elem with token, if elem is this Locker's, to its waiter.
// The grant was made after after, after the waiter's element was sent, and after any call
// that saw an older token held. It reports false when elem is this Locker's and no waiter
// takes the grant; a grant that a reply revealed is then left to the leaving waiter, which
// frees it.
func (ws *waiting) deliver(k keys, elem string, token int64, after time.Time) bool {
	if !strings.HasPrefix(elem, ws.id+".") {
		return true // not this Locker's
	}
	ln := ws.line(k.channel)
	if ln == nil {
		return false
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	// Grants reach this Locker in any order (the announcements, and the replies that reveal
	// them; several at once for shared waiters and the slots of a limit): they are matched
	// by token.
	if _, ok := ln.given[token]; ok {
		return true // delivered already
	}
	i := slices.IndexFunc(ln.waiters, func(w *waiter) bool { return w.elem == elem })
	if i < 0 || ln.waiters[i].got {
		return false
	}
	w := ln.waiters[i]
	w.got = true
	ln.give(token)
	start := later(after, w.sent)
	if ln.seenOf < token {
		start = later(start, ln.seen)
	}
	w.grant <- grant{token: token, value: elem + ":" + strconv.FormatInt(token, 10), lease: w.lease, start: start}
	return true
}

// saw records that a reply to a call sent at sent showed held as the lock value of k: a grant
// to one of this Locker's waiters is delivered, and the token, whoever's (a release's own
// too), dates the grants after it.
func (ws *waiting) saw(k keys, sent time.Time, held string) {
	owner, token, ok := splitValue(held)
	if !ok {
		return
	}
	ws.deliver(k, owner, token, time.Time{})
	if ln := ws.line(k.channel); ln != nil {
		ln.mu.Lock()
		if sent.After(ln.seen) {
			ln.seen, ln.seenOf = sent, token
		}
		ln.mu.Unlock()
	}
}

// listening reports whether this Locker waits on ch with a confirmed subscription.
func (ws *waiting) listening(ch string) bool {
	ln := ws.line(ch)
	return ln != nil && ln.subscribed()
}

// queuedOn reports whether this Locker has elements queued on ch, so that a release of the
// resource names it: a grant to one of them comes back in the release's reply.
func (ws *waiting) queuedOn(ch string) bool {
	ln := ws.line(ch)
	if ln == nil {
		return false
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return slices.ContainsFunc(ln.waiters, queued)
}

// subscribed reports whether the server confirmed ln's subscription.
func (ln *line) subscribed() bool {
	select {
	case <-ln.ready:
		return true
	default:
		return false
	}
}

// givenFor is how long a line remembers a token it delivered: longer than an announcement or
// a reply that reveals the grant can take to arrive.
const givenFor = 4 * (grantLease + entryTTL)

// give records that token was delivered. The caller holds ln.mu.
func (ln *line) give(token int64) {
	now := time.Now()
	if ln.given == nil {
		ln.given = map[int64]time.Time{}
	}
	if len(ln.given) >= 256 && len(ln.given)&255 == 0 {
		for t, at := range ln.given {
			if now.Sub(at) > givenFor {
				delete(ln.given, t)
			}
		}
	}
	ln.given[token] = now
}

// leaseSeen records that the lock of ln had left of its lease when a reply came back at
// replied: the front waiter checks with Redis as soon as it ends (a holder that died sends no
// announcement), unless its next poll comes first. A left of 0 is a lease ending within the
// millisecond (PTTL clamps a lease that ran out after the script's start to 0): check again
// at once rather than at the next poll. A negative left (no lease) arms nothing.
func (ln *line) leaseSeen(replied time.Time, left time.Duration) {
	if left < 0 {
		return
	}
	ln.mu.Lock()
	ln.due = replied.Add(left + time.Millisecond) // PTTL is rounded to the millisecond
	ln.mu.Unlock()
}

// nextPoll returns how long w waits before its next check with Redis: d, or less when w is
// the front waiter and the holder's lease ends sooner.
func (ln *line) nextPoll(w *waiter, d time.Duration) time.Duration {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if !ln.due.IsZero() && ln.front() == w {
		return min(d, max(time.Until(ln.due), 0))
	}
	return d
}

// isFront reports whether w is the longest-waiting waiter of ln without a grant: the one that
// polls.
func (ln *line) isFront(w *waiter) bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.front() == w
}

// front returns ln's longest-waiting waiter without a grant, or nil. The caller holds ln.mu.
func (ln *line) front() *waiter {
	i := slices.IndexFunc(ln.waiters, func(w *waiter) bool { return !w.got })
	if i < 0 {
		return nil
	}
	return ln.waiters[i]
}

// wakeFront makes ln's front waiter poll: at once, or as soon as the call that queues it
// returns. The caller holds ln.mu.
func (ln *line) wakeFront() {
	if w := ln.front(); w != nil {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// entry returns the content of this Locker's waiter key for ln (see lib.lua): the longest
// lease of its grants, 0 (its queue elements carry their own rules) and since when it waits.
func (ln *line) entry() string {
	return strconv.FormatInt(grantLease.Milliseconds(), 10) + ":0:" + strconv.FormatInt(ln.since, 10)
}

// queued reports whether w's element is in the Redis queue.
func queued(w *waiter) bool { return w.joined && !w.got }

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
