package fencing

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A Status is what Redis holds of one resource at one moment, as [Locker.Inspect] reads it:
// for diagnostics, dashboards and operators (fencekit show and locks print it). It is a
// snapshot: by the time it is read, holders may have released, expired or been replaced.
type Status struct {
	// Resource is the resource's name.
	Resource string
	// Holders are the acquisitions that hold the resource, by token: one exclusive holder,
	// or the shared or limited holders whose lease has not ended. Empty when it is free.
	Holders []Holder
	// Shared reports whether the holders hold the resource shared ([Shared]).
	Shared bool
	// Limit is the holders' limit: 1 for an exclusive holder, n for [WithLimit](n); 0 when
	// the resource is free or shared.
	Limit int
	// Waiters are the calls queued for the resource, the next to be served first.
	Waiters []Waiter
	// NextToken is the lowest token the next acquisition of the resource gets: the last
	// token issued plus one, or 1 when the resource has no counter (with
	// [WithServerTimeFloor] it is at least the server's clock in microseconds).
	NextToken int64
	// CounterTTL is how long the resource's counter lives without a new token
	// ([WithCounterExpiry]); 0 when it never expires or there is none.
	CounterTTL time.Duration
}

// A Holder is one acquisition that holds a resource, in a [Status].
type Holder struct {
	// Token is the acquisition's fencing token.
	Token int64
	// TTL is the lease it has left, by the server's clock.
	TTL time.Duration
	// Owner identifies the acquisition: a random value of 22 characters, or for a lock
	// granted from the queue, the waiter's place in it.
	Owner string
}

// A Waiter is one call queued for a resource, in a [Status].
type Waiter struct {
	// Locker is the id of the Locker the call waits in, random per Locker.
	Locker string
	// Shared and Limit are the kind of acquisition it waits for, as in [Status]: Limit 1
	// for an exclusive one, 0 for a shared one.
	Shared bool
	Limit  int
	// TimeFloor and CounterExpiry are the rules its grant follows for its token
	// ([WithServerTimeFloor], [WithCounterExpiry]).
	TimeFloor     bool
	CounterExpiry time.Duration
	// Alive reports whether its Locker still renews its place in the queue; a waiter whose
	// Locker stopped (a process that died) is skipped when it reaches the head.
	Alive bool
	// Waiting is how long its Locker has been waiting for the resource, by the Locker's
	// clock, when Alive.
	Waiting time.Duration
}

// Inspect reads what Redis holds of resource, in one round trip that changes nothing: its
// holders with their tokens and leases, their kind, the waiters queued for it and the next
// token. An invalid resource name returns an error wrapping [ErrInvalid] and sends nothing;
// other errors come from Redis. It works on a closed Locker.
func (l *Locker) Inspect(ctx context.Context, resource string) (*Status, error) {
	if err := l.checkName(resource); err != nil {
		return nil, opErr("inspect", resource, err)
	}
	k := resourceKeys(l.cfg.prefix, resource)
	res, err := inspectScript.runOn(ctx, l.client, k).Slice()
	if err != nil {
		return nil, opErr("inspect", resource, err)
	}
	st, err := parseStatus(resource, res)
	if err != nil {
		return nil, opErr("inspect", resource, err)
	}
	return st, nil
}

// checkName validates a call that names one resource and sends nothing else: the Locker's
// own settings and the name.
func (l *Locker) checkName(resource string) error {
	if l == nil {
		return invalidf("nil Locker")
	}
	if l.cfg.err != nil {
		return l.cfg.err
	}
	return validResource(resource)
}

// parseStatus decodes inspect.lua's reply.
func parseStatus(resource string, res []any) (*Status, error) {
	if len(res) != 7 {
		return nil, fmt.Errorf("unexpected reply %v", res)
	}
	now, err := strconv.ParseInt(str(res[0]), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("unexpected reply %v", res)
	}
	st := &Status{Resource: resource, NextToken: 1}
	switch kind := str(res[1]); kind {
	case "":
	case "x":
		st.Limit = 1
	case "shared":
		st.Shared = true
	default:
		st.Limit, _ = strconv.Atoi(kind)
	}
	holders, _ := res[2].([]any)
	for i := 0; i+1 < len(holders); i += 2 {
		owner, token, ok := splitValue(str(holders[i]))
		end, err := strconv.ParseInt(str(holders[i+1]), 10, 64)
		if !ok || err != nil {
			continue
		}
		st.Holders = append(st.Holders, Holder{Token: token, TTL: time.Duration(end-now) * time.Millisecond, Owner: owner})
	}
	slices.SortFunc(st.Holders, func(a, b Holder) int { return cmp.Compare(a.Token, b.Token) })
	if len(st.Holders) == 0 {
		st.Shared, st.Limit = false, 0
	}
	if n, err := strconv.ParseInt(str(res[3]), 10, 64); err == nil && n > 0 {
		st.NextToken = n + 1
		if pttl, _ := res[4].(int64); pttl > 0 {
			st.CounterTTL = time.Duration(pttl) * time.Millisecond
		}
	}
	waiting := map[string]string{}
	ws, _ := res[6].([]any)
	for i := 0; i+1 < len(ws); i += 2 {
		waiting[str(ws[i])] = str(ws[i+1])
	}
	queue, _ := res[5].([]any)
	for _, e := range queue {
		w, ok := parseWaiter(str(e))
		if !ok {
			continue
		}
		if v := waiting[w.Locker]; v != "" {
			w.Alive = true
			if since, err := strconv.ParseInt(v[strings.LastIndexByte(v, ':')+1:], 10, 64); err == nil && since > 0 {
				w.Waiting = max(time.Duration(now-since)*time.Millisecond, 0)
			}
		}
		st.Waiters = append(st.Waiters, w)
	}
	return st, nil
}

// parseWaiter reads a queue element (see element) as a Waiter, without its liveness.
func parseWaiter(elem string) (Waiter, bool) {
	id, rest, ok := strings.Cut(elem, ".")
	if !ok {
		return Waiter{}, false
	}
	rest = rest[strings.IndexByte(rest, '.')+1:]
	digits := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	rules := ""
	if digits >= 0 {
		rules = rest[digits:]
	}
	w := Waiter{Locker: id, Limit: 1}
	m := elementMode(elem)
	switch {
	case m.shared:
		w.Shared, w.Limit = true, 0
	case m.limit > 1:
		w.Limit = m.limit
	}
	if i := strings.IndexByte(rules, 'e'); i >= 0 {
		end := i + 1
		for end < len(rules) && rules[end] >= '0' && rules[end] <= '9' {
			end++
		}
		ms, _ := strconv.ParseInt(rules[i+1:end], 10, 64)
		w.TimeFloor, w.CounterExpiry = true, time.Duration(ms)*time.Millisecond
	} else if strings.IndexByte(rules, 'f') >= 0 {
		w.TimeFloor = true
	}
	return w, true
}

// ForceRelease frees resource from its holder with token, as that holder's own Release
// would: the resource goes to the next waiters of its queue at once, with new tokens, and
// the holder's Release and Extend then return [ErrNotHeld]. It is for operators freeing a
// lock whose holder is stuck (fencekit release --force), not for the holder itself: the
// holder is not told and may still be working, so this is safe for data only when the store
// checks tokens, which refuses the old holder's later writes. It returns an error wrapping
// ErrNotHeld, and changes nothing, when no holder of resource has token (it was released,
// expired or replaced meanwhile); [ErrInvalid] for an invalid name, sending nothing; other
// errors come from Redis.
func (l *Locker) ForceRelease(ctx context.Context, resource string, token int64) error {
	st, err := l.Inspect(ctx, resource)
	if err != nil {
		return opErr("force release", resource, err)
	}
	i := slices.IndexFunc(st.Holders, func(h Holder) bool { return h.Token == token })
	if i < 0 {
		return opErr("force release", resource, ErrNotHeld)
	}
	m := mode{shared: st.Shared, limit: st.Limit}
	k := resourceKeys(l.cfg.prefix, resource)
	held, err := l.releaseOne(ctx, k, st.Holders[i].Owner+":"+strconv.FormatInt(token, 10), m, nil)
	switch {
	case err != nil:
		return opErr("force release", resource, err)
	case !held:
		return opErr("force release", resource, ErrNotHeld)
	}
	return nil
}

// str returns v as a string, "" when it is not one.
func str(v any) string {
	s, _ := v.(string)
	return s
}
