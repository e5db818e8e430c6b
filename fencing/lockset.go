package fencing

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxResources is the most distinct resources one call on a set accepts.
const MaxResources = 64

// A LockSet is one acquisition of several resources' locks, each with its own fencing token,
// taken by [Locker.TryAcquireAll] or [Locker.AcquireAll]. Its methods are safe for concurrent
// use. The methods of a nil *LockSet return [ErrNotHeld], so `defer set.Release(ctx)` is safe
// after a failed acquire.
type LockSet struct {
	locker *Locker
	hooks  hookList
	locks  []*Lock // in the order taken: the canonical order
}

// Locks returns the set's locks in the order they were taken, which is the canonical order
// (see [Locker.AcquireAll]). The slice is a copy; the locks are the set's own, so releasing one
// of them releases it for the set too.
func (s *LockSet) Locks() []*Lock {
	if s == nil {
		return nil
	}
	return slices.Clone(s.locks)
}

// Token returns the fencing token of resource in the set, or 0 when resource is not in it.
// Pass each resource's token to the writes of that resource.
func (s *LockSet) Token(resource string) int64 {
	if s == nil {
		return 0
	}
	for _, k := range s.locks {
		if k.resource == resource {
			return k.token
		}
	}
	return 0
}

// Release frees every lock of the set that this acquisition still holds, in one round trip
// per server (a pipeline), handing each to its resource's longest-waiting waiter as
// [Lock.Release] does. It returns nil when all were released; otherwise the errors of the
// others joined, each naming its resource: one wrapping [ErrNotHeld] for a lock that had
// expired, passed on or been released already (nothing is changed for it), a Redis error for
// one that then stays held until its TTL runs out.
func (s *LockSet) Release(ctx context.Context) error {
	if s == nil || len(s.locks) == 0 {
		return opErr("release", "", ErrNotHeld)
	}
	ctx = s.hooks.start(ctx, OpReleaseAll, "")
	begin := time.Now()
	errs := s.release(ctx)
	err := joinAll(nonNil(errs))
	ev := s.event(OpReleaseAll, begin, err, errs)
	ev.Held = time.Since(s.locks[0].acquired)
	s.hooks.end(ctx, ev)
	return err
}

// release releases the set's locks and returns the error of each, nil for those released.
func (s *LockSet) release(ctx context.Context) []error {
	errs := make([]error, len(s.locks))
	var ks []keys
	var values []string
	var which []int
	for i, k := range s.locks {
		k.stopLater()
		if k.released.Load() {
			errs[i] = opErr("release", k.resource, ErrNotHeld)
			continue
		}
		ks, values, which = append(ks, k.keys), append(values, k.value), append(which, i)
	}
	held, rerrs := s.locker.releaseSet(ctx, ks, values)
	for j, i := range which {
		k := s.locks[i]
		switch {
		case rerrs[j] != nil:
			errs[i] = opErr("release", k.resource, rerrs[j])
		case !held[j]:
			errs[i] = opErr("release", k.resource, ErrNotHeld)
		default:
			k.released.Store(true)
			k.validUntil.Store(0)
		}
	}
	return errs
}

// Extend resets the TTL of every lock of the set to ttl, counted from now, in one round trip
// per server, for the locks this acquisition still holds; it never takes a free lock again.
// It returns nil when all were extended, or the errors of the others joined, each naming its
// resource (wrapping [ErrNotHeld] for a lock no longer held, which is left as it is). A ttl
// outside [MinTTL, MaxTTL] returns an error wrapping [ErrInvalid] and sends nothing.
func (s *LockSet) Extend(ctx context.Context, ttl time.Duration) error {
	if s == nil || len(s.locks) == 0 {
		return opErr("extend", "", ErrNotHeld)
	}
	for _, k := range s.locks {
		k.stopLater()
	}
	errs, err := s.extendAll(ctx, ttl, OpExtendAll)
	if err != nil {
		return err
	}
	return joinAll(nonNil(errs))
}

// extendAll extends every lock of the set to ttl in one pipeline, as op for the hooks (one
// event for the set), and returns the error of each lock, or an error wrapping ErrInvalid
// for a ttl out of range, when it sends nothing.
func (s *LockSet) extendAll(ctx context.Context, ttl time.Duration, op Op) ([]error, error) {
	ctx = s.hooks.start(ctx, op, "")
	begin := time.Now()
	if err := validTTL(ttl); err != nil {
		s.hooks.end(ctx, s.event(op, begin, err, nil))
		return nil, err
	}
	ms := millis(ttl)
	calls := make([]scriptCall, len(s.locks))
	for i, k := range s.locks {
		calls[i] = scriptCall{keys: []string{k.keys.lock}, args: []any{k.value, ms}}
	}
	cmds := s.locker.pipeScripts(ctx, extendAllScript, calls)
	errs := make([]error, len(s.locks))
	for i, k := range s.locks {
		n, err := cmds[i].Int64()
		switch {
		case err != nil:
			errs[i] = opErr("extend", k.resource, err)
		case n == flagNotHeld:
			errs[i] = opErr("extend", k.resource, ErrNotHeld)
		case n != flagAcquired:
			errs[i] = opErr("extend", k.resource, errors.New("unexpected reply "+strconv.FormatInt(n, 10)))
		default:
			k.setValidUntil(begin, time.Duration(ms)*time.Millisecond)
		}
	}
	s.hooks.end(ctx, s.event(op, begin, joinAll(nonNil(errs)), errs))
	return errs, nil
}

// event returns the hooks' event of an operation on the whole set; errs holds the error of
// each lock, if known.
func (s *LockSet) event(op Op, begin time.Time, err error, errs []error) Event {
	e := Event{Op: op, Resources: s.names(), Outcome: OutcomeOK, Elapsed: time.Since(begin)}
	if err != nil {
		e.Outcome, e.Err = outcomeOf(err), err
		for i, x := range errs {
			if x != nil {
				e.Resource = s.locks[i].resource
				break
			}
		}
	}
	return e
}

func (s *LockSet) names() []string {
	names := make([]string, len(s.locks))
	for i, k := range s.locks {
		names[i] = k.resource
	}
	return names
}

// TryAcquireAll makes one attempt to take the locks of all resources together, each with its
// own fencing token, without waiting. Resources are deduplicated and taken in the canonical
// order (see [Locker.AcquireAll]); when they all live on one server (a *redis.Client) or in
// one Cluster slot and all are free, that takes one round trip. When one is busy (held by
// another owner, or waiters are queued for it), the locks already taken are released before
// TryAcquireAll returns an error wrapping [ErrNotAcquired] that names that resource;
// [RetryAfter] reports its holder's remaining TTL. Bad input (no resources, an invalid name,
// more than [MaxResources] distinct ones) returns an error wrapping [ErrInvalid] and sends
// nothing. Any other error means nothing is held. Options override the Locker's settings for
// this call.
func (l *Locker) TryAcquireAll(ctx context.Context, resources []string, opts ...Option) (*LockSet, error) {
	cfg := *l.cfg.with(opts)
	cfg.maxWait = 0
	return l.acquireAll(ctx, &cfg, OpTryAcquireAll, resources)
}

// AcquireAll takes the locks of all resources together, each with its own fencing token,
// waiting while some are busy.
//
// The resources are deduplicated (a duplicate is not an error) and taken in one canonical
// order, whatever order the caller listed them in, so that two calls with overlapping sets
// never deadlock: by name, or on a *redis.ClusterClient by the Cluster hash slot of the
// resource's keys, then by name. AcquireAll never waits for a resource while holding one
// that comes later in that order. When the resources share one server (a *redis.Client) or
// one Cluster slot (resources in different slots are taken one slot after the other), the free
// ones at the head of the order are taken in one round trip, all of them when all are free. A
// busy resource is then waited for as [Locker.Acquire] waits: in its FIFO queue, behind the
// waiters of that single resource, never ahead of them. Meanwhile the locks already taken are
// held and their leases renewed every third of the TTL. With [WithReplicas], each resource is
// taken on its own, with its WAIT.
//
// When the wait ends (ctx, [WithMaxWait], which bounds the whole call, or [Locker.Close]),
// every lock already taken is released before AcquireAll returns an error that names the
// resource it waited for and wraps its [Locker.Acquire] error: it matches [ErrNotAcquired]
// (and ctx.Err() when the context ended), and [RetryAfter] and [BusyResource] work on it. When
// a lock already taken is lost while waiting (its renewal finds it gone), the others are
// released too and the error matches both ErrNotAcquired and [ErrNotHeld], naming the lost
// resource. Bad
// input returns an error wrapping [ErrInvalid] as for [Locker.TryAcquireAll], and sends
// nothing.
func (l *Locker) AcquireAll(ctx context.Context, resources []string, opts ...Option) (*LockSet, error) {
	return l.acquireAll(ctx, l.cfg.with(opts), OpAcquireAll, resources)
}

// member is one resource of a set.
type member struct {
	name string
	keys keys
	slot uint16 // its Cluster hash slot; 0 unless the client is a Cluster's
}

// acquireAll is TryAcquireAll and AcquireAll with the call's settings resolved.
func (l *Locker) acquireAll(ctx context.Context, cfg *config, op Op, resources []string) (*LockSet, error) {
	ctx = cfg.hooks.start(ctx, op, "")
	begin := time.Now()
	ms, err := l.members(cfg, resources)
	if err == nil {
		err = l.check(ctx, cfg, ms[0].name)
	}
	var set *LockSet
	var failed string
	attempts := 0
	if err == nil {
		set, failed, attempts, err = l.takeAll(ctx, cfg, ms)
	}
	ev := Event{Op: op, Resource: failed, Attempts: attempts, Elapsed: time.Since(begin)}
	if len(ms) > 0 {
		ev.Resources = make([]string, len(ms))
		for i, m := range ms {
			ev.Resources[i] = m.name
		}
	}
	if err != nil {
		ev.Outcome, ev.Err = outcomeOf(err), err
	} else {
		ev.Outcome = OutcomeAcquired
		for _, k := range set.locks {
			ev.ClockBehind = max(ev.ClockBehind, k.behind)
		}
	}
	cfg.hooks.end(ctx, ev)
	return set, err
}

// members validates resources and returns them deduplicated, in the canonical order.
func (l *Locker) members(cfg *config, resources []string) ([]member, error) {
	if cfg.limit > 1 {
		return nil, invalidf("WithLimit(%d) applies to one resource, not to a set", cfg.limit)
	}
	if len(resources) == 0 {
		return nil, invalidf("empty set of resources")
	}
	_, cluster := l.client.(*redis.ClusterClient)
	ms := make([]member, len(resources))
	for i, r := range resources {
		if err := validResource(r); err != nil {
			return nil, err
		}
		ms[i] = member{name: r, keys: resourceKeys(cfg.prefix, r)}
		if cluster {
			ms[i].slot = slot(ms[i].keys.lock)
		}
	}
	slices.SortFunc(ms, func(a, b member) int {
		if c := cmp.Compare(a.slot, b.slot); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	ms = slices.CompactFunc(ms, func(a, b member) bool { return a.name == b.name })
	if len(ms) > MaxResources {
		return nil, invalidf("%d resources exceed %d", len(ms), MaxResources)
	}
	return ms, nil
}

// groups splits ms, in order, into the runs that one script can take: all of them on a
// *redis.Client, those of one slot on a *redis.ClusterClient, one each otherwise (a Ring
// spreads resources over servers).
func (l *Locker) groups(ms []member) [][]member {
	switch l.client.(type) {
	case *redis.Client:
		return [][]member{ms}
	case *redis.ClusterClient:
		var gs [][]member
		for start := 0; start < len(ms); {
			end := start + 1
			for end < len(ms) && ms[end].slot == ms[start].slot {
				end++
			}
			gs = append(gs, ms[start:end])
			start = end
		}
		return gs
	}
	gs := make([][]member, len(ms))
	for i := range ms {
		gs[i] = ms[i : i+1]
	}
	return gs
}

// takeAll takes the locks of ms in order (see AcquireAll). It returns the set, or the
// resource that failed and the error; attempts counts the acquire scripts sent.
func (l *Locker) takeAll(ctx context.Context, cfg *config, ms []member) (set *LockSet, failed string, attempts int, err error) {
	set = &LockSet{locker: l, hooks: cfg.hooks, locks: make([]*Lock, 0, len(ms))}
	var deadline time.Time
	if cfg.maxWait > 0 {
		deadline = time.Now().Add(cfg.maxWait)
	}
	// While waiting, the locks already taken are renewed; losing one ends the wait.
	var keep []*renewer
	wait, lose := ctx, context.CancelCauseFunc(nil)
	defer func() {
		for _, r := range keep {
			r.stop()
		}
		if lose != nil {
			if cause := context.Cause(wait); err != nil && ctx.Err() == nil && errors.Is(cause, ErrNotHeld) {
				// The set was not acquired, because a lock already taken was lost.
				err, failed = opErr("acquire all", "", join(ErrNotAcquired, cause)), ""
				var op *opError
				if errors.As(cause, &op) {
					failed = op.resource
				}
			}
			lose(nil)
		}
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(cfg.ttl, releaseTimeout))
			set.release(rctx)
			cancel()
			set = nil
			return
		}
		// A lock renewed while waiting, or granted from a queue with a short lease, goes on
		// to the TTL as a single Acquire's does.
		ttl := time.Duration(millis(cfg.ttl)) * time.Millisecond
		for _, k := range set.locks {
			k.mu.Lock()
			pending := k.later != nil
			k.mu.Unlock()
			if !pending && time.Until(k.deadline()) < ttl/2 {
				k.extendLater(cfg, ttl)
			}
		}
	}()
	for _, g := range l.groups(ms) {
		rest := g
		if cfg.replicas == 0 {
			attempts++
			locks, busy, err := l.attemptAll(wait, cfg, g)
			set.locks = append(set.locks, locks...)
			if err != nil {
				return set, g[len(locks)].name, attempts, opErr("acquire all", "", err)
			}
			if busy == nil {
				continue
			}
			if cfg.maxWait == 0 {
				return set, busy.resource, attempts, opErr("acquire all", "", busy)
			}
			rest = g[len(locks):]
		}
		for _, m := range rest {
			if lose == nil && len(set.locks) > 0 {
				wait, lose = context.WithCancelCause(ctx)
				for _, k := range set.locks {
					keep = append(keep, k.keepAlive(wait, cfg, named(lose, k.resource)))
				}
			}
			wcfg := *cfg
			if !deadline.IsZero() {
				wcfg.maxWait = max(time.Until(deadline), 0)
			}
			lock, n, err := l.wait(wait, &wcfg, m.name)
			attempts += n
			if err != nil {
				return set, m.name, attempts, opErr("acquire all", "", err)
			}
			set.locks = append(set.locks, lock)
			if lose == nil {
				wait, lose = context.WithCancelCause(ctx)
			}
			keep = append(keep, lock.keepAlive(wait, cfg, named(lose, lock.resource)))
		}
	}
	return set, "", attempts, nil
}

// named returns cancel with a cause that names resource, the lock that was lost.
func named(cancel context.CancelCauseFunc, resource string) context.CancelCauseFunc {
	return func(cause error) { cancel(opErr("renew", resource, cause)) }
}

// attemptAll runs the multi-resource acquire script once on g, whose keys one script can
// take. It returns the locks it took, in order, and when not all, the busy error of the next;
// on an error, nothing is held.
func (l *Locker) attemptAll(ctx context.Context, cfg *config, g []member) ([]*Lock, *busyError, error) {
	owner, err := newOwner()
	if err != nil {
		return nil, nil, err
	}
	ms := millis(cfg.ttl)
	ks := make([]string, 0, 3*len(g))
	for _, m := range g {
		ks = append(ks, m.keys.lock, m.keys.fence, m.keys.queue)
	}
	sent := time.Now()
	res, err := acquireAllScript.runKeys(ctx, l.client, ks, owner, ms, cfg.opts(l.waits.publish)).Result()
	if err != nil {
		// Unless Redis answered with an error, the script may have run: free what it took.
		var reply redis.Error
		if !errors.As(err, &reply) {
			l.releaseOwners(ctx, g, owner)
		}
		if ctx.Err() != nil {
			return nil, nil, join(ErrNotAcquired, ctx.Err())
		}
		return nil, nil, err
	}
	flag, behind, pttl, tokens, err := parseAcquireAll(res, len(g))
	if err != nil {
		l.releaseOwners(ctx, g, owner)
		return nil, nil, err
	}
	locks := make([]*Lock, len(tokens))
	for i, token := range tokens {
		k := &Lock{
			locker:   l,
			hooks:    cfg.hooks,
			resource: g[i].name,
			keys:     g[i].keys,
			value:    owner + ":" + strconv.FormatInt(token, 10),
			token:    token,
			acquired: sent,
			behind:   time.Duration(behind) * time.Microsecond,
		}
		k.setValidUntil(sent, time.Duration(ms)*time.Millisecond)
		locks[i] = k
	}
	if err := ctx.Err(); err != nil {
		l.releaseOwners(ctx, g, owner)
		return nil, nil, join(ErrNotAcquired, err)
	}
	if len(locks) > 0 && !locks[0].valid() {
		// The reply came back after the leases could have run out: count it as busy.
		l.releaseOwners(ctx, g, owner)
		return nil, &busyError{resource: g[0].name, retryAfter: lateReply}, nil
	}
	if flag == flagAcquired {
		return locks, nil, nil
	}
	return locks, &busyError{resource: g[len(locks)].name, retryAfter: time.Duration(pttl) * time.Millisecond}, nil
}

// parseAcquireAll decodes the reply of acquireall.lua for n resources.
func parseAcquireAll(res any, n int) (flag, behind, pttl int64, tokens []int64, err error) {
	arr, _ := res.([]any)
	if len(arr) < 2 {
		return 0, 0, 0, nil, errors.New("unexpected reply")
	}
	flag, _ = arr[0].(int64)
	var raw []any
	switch flag {
	case flagAcquired:
		behind, _ = arr[1].(int64)
		raw = arr[2:]
		if len(raw) != n {
			return 0, 0, 0, nil, errors.New("unexpected reply: wrong number of tokens")
		}
	case flagBusy:
		if len(arr) < 3 {
			return 0, 0, 0, nil, errors.New("unexpected reply")
		}
		taken, _ := arr[1].(int64)
		pttl, _ = arr[2].(int64)
		raw = arr[3:]
		if int64(len(raw)) != taken || taken >= int64(n) {
			return 0, 0, 0, nil, errors.New("unexpected reply: wrong number of tokens")
		}
	default:
		return 0, 0, 0, nil, errors.New("unexpected reply")
	}
	tokens = make([]int64, len(raw))
	for i, v := range raw {
		if tokens[i], err = parseToken(v); err != nil {
			return 0, 0, 0, nil, err
		}
	}
	return flag, behind, pttl, tokens, nil
}

// releaseOwners frees whatever locks of g owner holds, with a fresh, short context. Errors are
// ignored: the leases run out by themselves.
func (l *Locker) releaseOwners(ctx context.Context, g []member, owner string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	ks := make([]keys, len(g))
	values := make([]string, len(g))
	for i, m := range g {
		ks[i], values[i] = m.keys, owner+":"
	}
	l.releaseAll(rctx, ks, values)
}

// releaseAll runs the release script for each lock value (see release) in one pipeline and
// reports for each whether it held the lock, or its error.
func (l *Locker) releaseAll(ctx context.Context, ks []keys, values []string) ([]bool, []error) {
	held, errs := make([]bool, len(ks)), make([]error, len(ks))
	if len(ks) == 0 {
		return held, errs
	}
	calls := make([]scriptCall, len(ks))
	for i, k := range ks {
		calls[i] = scriptCall{keys: k.script(), args: l.releaseArgs(k, values[i])}
	}
	sent := time.Now()
	for i, cmd := range l.pipeScripts(ctx, releaseScript, calls) {
		res, err := cmd.Result()
		if err != nil {
			errs[i] = err
			continue
		}
		held[i], errs[i] = l.releaseReply(ks[i], sent, values[i], res)
	}
	return held, errs
}

// releaseSet releases the locks of one acquisition of a set, as releaseAll does, with one
// script for the locks of each server or Cluster slot (releaseall.lua, all in one pipeline), then
// the release script for each lock that one left as it was (waiters queued, or not held).
func (l *Locker) releaseSet(ctx context.Context, ks []keys, values []string) ([]bool, []error) {
	held, errs := make([]bool, len(ks)), make([]error, len(ks))
	var runs [][]int // indices of ks, one run per script
	switch l.client.(type) {
	case *redis.Client:
		runs = [][]int{make([]int, len(ks))}
		for i := range ks {
			runs[0][i] = i
		}
	case *redis.ClusterClient:
		bySlot := map[uint16]int{}
		for i, k := range ks {
			s := slot(k.lock)
			j, ok := bySlot[s]
			if !ok {
				j = len(runs)
				bySlot[s] = j
				runs = append(runs, nil)
			}
			runs[j] = append(runs[j], i)
		}
	default:
		return l.releaseAll(ctx, ks, values)
	}
	calls := make([]scriptCall, len(runs))
	for j, run := range runs {
		c := scriptCall{keys: make([]string, len(run)), args: make([]any, len(run))}
		for n, i := range run {
			c.keys[n], c.args[n] = ks[i].lock, values[i]
		}
		calls[j] = c
	}
	sent := time.Now()
	var left []int // indices of ks for release.lua
	for j, cmd := range l.pipeScripts(ctx, releaseAllScript, calls) {
		flags, err := cmd.Slice()
		if err == nil && len(flags) != len(runs[j]) {
			err = errors.New("unexpected reply")
		}
		for n, i := range runs[j] {
			switch {
			case err != nil:
				left = append(left, i)
			case flags[n] == int64(flagReleased):
				held[i] = true
				l.waits.released(ks[i], sent, values[i], "", 0)
			default:
				left = append(left, i)
			}
		}
	}
	if len(left) == 0 {
		return held, errs
	}
	lks, lvalues := make([]keys, len(left)), make([]string, len(left))
	for n, i := range left {
		lks[n], lvalues[n] = ks[i], values[i]
	}
	lheld, lerrs := l.releaseAll(ctx, lks, lvalues)
	for n, i := range left {
		held[i], errs[i] = lheld[n], lerrs[n]
	}
	return held, errs
}

// scriptCall is one run of a script: its keys and arguments.
type scriptCall struct {
	keys []string
	args []any
}

// pipeScripts runs s once per call, with EVALSHA in one pipeline (one round trip per server),
// then the calls that Redis answered with NOSCRIPT again with EVAL, in a second pipeline.
func (l *Locker) pipeScripts(ctx context.Context, s *script, calls []scriptCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	if len(calls) == 1 {
		cmds[0] = s.runKeys(ctx, l.client, calls[0].keys, calls[0].args...)
		return cmds
	}
	send := func(verb string, body any, which []int) {
		pipe := l.client.Pipeline()
		for _, i := range which {
			c := calls[i]
			args := make([]any, 0, 3+len(c.keys)+len(c.args))
			args = append(args, verb, body, len(c.keys))
			for _, k := range c.keys {
				args = append(args, k)
			}
			args = append(args, c.args...)
			cmd := redis.NewCmd(ctx, args...)
			cmd.SetFirstKeyPos(3)
			_ = pipe.Process(ctx, cmd)
			cmds[i] = cmd
		}
		_, _ = pipe.Exec(ctx)
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	send("evalsha", s.sha, all)
	var unknown []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
			unknown = append(unknown, i)
		}
	}
	if len(unknown) > 0 {
		send("eval", s.src, unknown)
	}
	return cmds
}

// slot returns the Redis Cluster hash slot of key (HASH_SLOT): CRC16 (XMODEM) of its hash
// tag, or of the whole key when it has no non-empty {…} section, modulo 16384.
func slot(key string) uint16 {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// BusyResource returns the resource that was busy when an acquisition failed because of it:
// the one named in the error of [Locker.TryAcquireAll], [Locker.AcquireAll] or [Locker.DoAll]
// (or of a single TryAcquire, Acquire or Do). The second result is false when err carries
// none.
func BusyResource(err error) (string, bool) {
	var b *busyError
	if errors.As(err, &b) {
		return b.resource, true
	}
	return "", false
}
