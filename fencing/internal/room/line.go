package room

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fencekit/fencekit/internal/wire"
)

// A room's lines: one per resource its calls wait on, the grants that the notifier, the
// scripts' replies and the polls bring, and the dating of each grant's lease.

// line is a room's state for one resource it waits on.
type line struct {
	k     wire.Keys
	since time.Time     // when the line was created (in the waiter key)
	ready chan struct{} // closed once the server confirms the subscription
	io    sync.Mutex    // orders polls and removals of elements

	mu      sync.Mutex          // guards the fields below and the line's waiters
	users   int                 // waiting calls that use the line
	linger  *time.Timer         // drops the line once idle for wire.EntryTTL
	limit   int                 // the limit of the calls that use the line; 0: exclusive or shared
	waiters []*waiter           // in arrival order
	renewBy time.Time           // the waiter key needs no write before then
	due     time.Time           // the holders' leases, as last seen, end by then: the front waiter checks
	given   map[int64]time.Time // the tokens delivered lately, and when
	seen    time.Time           // the latest call whose reply showed seenOf, another's token, held:
	seenOf  int64               // any later token was granted after seen
}

// waiter is one waiting call in a line.
type waiter struct {
	ln     *line
	kind   wire.Kind
	elem   string        // its queue element
	lease  time.Duration // of a grant to it: its TTL, at most GrantLease
	sent   time.Time     // when its element was first sent to Redis: any grant to it came later
	joined bool          // its element is (or may be) in the Redis queue, unless got
	got    bool          // a grant was delivered to it
	grant  chan Grant    // capacity 1
	wake   chan struct{} // capacity 1: check with Redis now
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
const givenFor = 4 * (GrantLease + wire.EntryTTL)

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

// leaseSeen records that the holders of ln's resource had left of their lease when a reply
// came back at replied: the front waiter checks with Redis as soon as it ends (a holder that
// died sends no announcement), unless its next poll comes first. A left of 0 is a lease
// ending within the millisecond (PTTL clamps a lease that ran out after the script's start
// to 0): check again at once rather than at the next poll. A negative left (no lease) arms
// nothing.
func (ln *line) leaseSeen(replied time.Time, left time.Duration) {
	if left < 0 {
		return
	}
	ln.mu.Lock()
	ln.due = replied.Add(left + time.Millisecond) // PTTL is rounded to the millisecond
	ln.mu.Unlock()
}

// left returns how long the holders' lease had left, as last seen, at now, and false when
// unknown.
func (ln *line) left(now time.Time) (time.Duration, bool) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.due.IsZero() {
		return 0, false
	}
	return max(ln.due.Sub(now), 0), true
}

// nextPoll returns how long w waits before its next check with Redis: d, or less when w is
// the front waiter and the holders' lease ends sooner.
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

// entry returns the value of this room's waiter key for ln: when it began waiting.
func (ln *line) entry() string { return wire.WaiterValue(ln.since) }

// queued reports whether w's element is in the Redis queue.
func queued(w *waiter) bool { return w.joined && !w.got }

// deliver hands the lock granted to elem with token, if elem is this room's, to its waiter.
// The grant was made after after, after the waiter's element was sent, and after any call
// that saw an older token held. It reports false when elem is this room's and no waiter
// takes the grant; a grant that a reply revealed is then left to the leaving waiter, which
// frees it.
func (ln *line) deliver(elem string, token int64, after time.Time) bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	// Grants reach a room in any order (the announcements, and the replies that reveal
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
	w.grant <- Grant{Token: token, Value: elem + ":" + strconv.FormatInt(token, 10), Lease: w.lease, Start: start}
	return true
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// line returns the line of the resource whose channel is ch, or nil.
func (r *Room) line(ch string) *line {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lines[ch]
}

// enter returns the line of c's resource, creating it and subscribing to its channel when it
// is new, and waits up to subscribePatience for the subscription to be confirmed. Exclusive
// and shared calls share a line; a line in use by calls of another limit is an error
// wrapping ErrKind.
func (r *Room) enter(ctx context.Context, c Call) (*line, error) {
	limit := 0
	if c.Kind.Limit > 1 && !c.Kind.Shared {
		limit = c.Kind.Limit
	}
	r.mu.Lock()
	if isDone(r.done) {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	ln := r.lines[c.Keys.Channel]
	if ln == nil {
		ln = &line{k: c.Keys, ready: make(chan struct{}), since: time.Now(), limit: limit}
		r.lines[c.Keys.Channel] = ln
		if r.notes != nil {
			r.notes.listen(c.Keys.Grants(r.id), true)
		}
	}
	ln.mu.Lock()
	if limit != ln.limit {
		if ln.users > 0 {
			have := ln.limit
			ln.mu.Unlock()
			r.mu.Unlock()
			return nil, &KindError{Have: wire.Kind{Limit: max(have, 1)}, Want: c.Kind}
		}
		ln.limit = limit
	}
	ln.users++
	if ln.linger != nil {
		ln.linger.Stop()
		ln.linger = nil
	}
	ln.mu.Unlock()
	r.mu.Unlock()
	if r.notes != nil {
		select {
		case <-ln.ready:
		case <-time.After(subscribePatience):
		case <-ctx.Done():
		case <-r.done:
		}
	}
	return ln, nil
}

// ErrClosed is Wait's error once the Locker is closed.
var ErrClosed = errors.New("fencing: locker closed")

// A KindError is Wait's error for a call of a limit while the room waits on the resource
// with calls of another (Have), or the reverse.
type KindError struct{ Have, Want wire.Kind }

func (e *KindError) Error() string { return "this Locker waits for the resource with another limit" }

// exit ends a call's use of ln; the last one out lets it linger for wire.EntryTTL, so a room
// that waits on the resource again soon keeps its subscription and fresh waiter key.
func (r *Room) exit(ln *line) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.users--; ln.users > 0 || isDone(r.done) {
		return
	}
	ln.linger = time.AfterFunc(wire.EntryTTL, func() { r.drop(ln) })
}

// drop forgets ln and its subscription, unless a call uses it again.
func (r *Room) drop(ln *line) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ln.mu.Lock()
	idle := ln.users == 0
	ln.mu.Unlock()
	if idle && r.lines[ln.k.Channel] == ln && !isDone(r.done) {
		delete(r.lines, ln.k.Channel)
		if r.notes != nil {
			r.notes.listen(ln.k.Grants(r.id), false)
		}
	}
}

// isDone reports whether done is closed.
func isDone(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}
