package room

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/wire"
)

// Grants reach the room three ways: announced on its channels (heard), in the replies of its
// Locker's releases and of its own polls (Granted). Each goes to its waiter, or is released
// again when none takes it (passOn).

// heard handles an announcement on one of the room's channels: "<element>:<token>".
func (r *Room) heard(ch, payload string) {
	k, ok := wire.GrantsOf(ch, r.id)
	if elem, token, ok2 := wire.SplitValue(payload); ok && ok2 {
		r.Granted(k, elem, token, time.Time{})
	}
}

// subscribed makes the front waiter of ch's resource check with Redis now: the server has
// just confirmed the subscription, perhaps on a new connection that lost an announcement.
func (r *Room) subscribed(ch string) {
	k, ok := wire.GrantsOf(ch, r.id)
	if !ok {
		return
	}
	ln := r.line(k.Channel)
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

// Granted hands a grant of k's resource to the queue element elem with token to its waiter,
// when elem is this room's; when no waiter of the room takes it, it is released again, which
// grants the resource to the next waiters. after is when the call that revealed the grant was
// sent (the grant was made after it), zero when unknown.
func (r *Room) Granted(k wire.Keys, elem string, token int64, after time.Time) {
	e, ok := wire.ParseElement(elem)
	if !ok || e.Locker != r.id {
		return // not this room's
	}
	if ln := r.line(k.Channel); ln != nil && ln.deliver(elem, token, after) {
		return
	}
	r.passOn(k, elem+":"+strconv.FormatInt(token, 10), e.Kind)
}

// Saw records that a reply to a call sent at sent showed held as the lock value of k's
// resource: a grant to one of the room's waiters is delivered, and the token, whoever's, dates
// the grants after it.
func (r *Room) Saw(k wire.Keys, sent time.Time, held string) {
	owner, token, ok := wire.SplitValue(held)
	if !ok {
		return
	}
	ln := r.line(k.Channel)
	if ln == nil {
		return
	}
	if e, ok := wire.ParseElement(owner); ok && e.Locker == r.id {
		ln.deliver(owner, token, time.Time{})
	}
	ln.mu.Lock()
	if sent.After(ln.seen) {
		ln.seen, ln.seenOf = sent, token
	}
	ln.mu.Unlock()
}

// passOn releases value, a grant of kind to a waiter of this room that no waiter takes (or
// "<element>:" for whatever token its element holds), which grants the resource to the next
// waiters. Errors are ignored: the lease then runs out by itself.
func (r *Room) passOn(k wire.Keys, value string, kind wire.Kind) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	self := ""
	if r.QueuedOn(k) {
		self = r.id
	}
	arg := kind.Arg()
	if kind.Exclusive() {
		arg = "k" // a grant's lease is short: keep its record
	}
	args := []any{value, arg, r.publish, self}
	if self == "" {
		args = args[:len(args)-1]
		if r.publish == "P" {
			args = args[:len(args)-1]
		}
	}
	sent := time.Now()
	res, err := wire.Release.RunOn(ctx, r.client, k, "", args...).Result()
	if LostReply(ctx, err) {
		res, err = wire.Release.RunOn(ctx, r.client, k, "", args...).Result()
	}
	if err != nil {
		return
	}
	if _, grants, err := wire.ParseRelease(res); err == nil {
		for _, g := range grants {
			r.Granted(k, g.Element, g.Token, sent)
		}
	}
}

// LostReply reports whether err leaves it unknown whether a script ran: the connection failed,
// the context still lasts.
func LostReply(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	var reply redis.Error
	return !errors.As(err, &reply)
}

// Passing reports whether err can pass by itself: the connection failed or timed out, or the
// server cannot serve the call yet (loading its data, a replica promoted or a primary demoted,
// the cluster or the primary down, a slot moving, another script running, too many clients).
func Passing(err error) bool {
	var ne net.Error
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, redis.ErrPoolTimeout) || redis.IsLoadingError(err) || redis.IsReadOnlyError(err) ||
		redis.IsClusterDownError(err) || redis.IsTryAgainError(err) || redis.IsMasterDownError(err) ||
		redis.IsMaxClientsError(err) || redis.HasErrorPrefix(err, "BUSY ") || moved || ask
}
