package fencing

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/seam"
)

// member is one resource of an acquisition.
type member struct {
	name string
	keys keys
	slot uint16 // its Cluster hash slot; 0 unless the client is a Cluster's
}

// attemptReply is what an attempt learnt when it did not take every resource.
type attemptReply struct {
	busy   *BusyError // the first resource not taken: busy, with the holder's remaining lease
	queued bool       // the waiter's element joined that resource's queue
	held   string     // queued: the exclusive holder's lock value the script saw, "" when none
}

// attempt runs one acquire script on g: acquire.lua on one resource, whose waiter's element
// elem (when not "") queues when it is busy, with entry for the Locker's waiter key (see
// acquire.lua); or acquireall.lua on several resources that one script can take (see
// groups). It returns the locks taken, in g's order, and when not all, what it learnt of the
// next one. On an error nothing is held: a script that may have run without its reply
// reaching us is undone by releasing whatever it took.
func (l *Locker) attempt(ctx context.Context, cfg *config, g []member, elem, entry string) ([]*Lock, attemptReply, error) {
	owner, err := newOwner()
	if err != nil {
		return nil, attemptReply{}, err
	}
	ms := millis(cfg.ttl)
	sent := time.Now()
	var res any
	if len(g) == 1 {
		res, err = l.acquireOne(ctx, cfg, g[0].keys, owner, ms, elem, entry)
	} else {
		args := []any{owner, ms}
		if cfg.timeFloor {
			args = append(args, cfg.floorArg(), cfg.expiryArg())
		}
		res, err = acquireAllScript.run(ctx, l.client, triples(g), args...).Result()
	}
	if err != nil {
		// Unless Redis answered with an error (the script failed), it may have run and left
		// us holding locks: free them rather than strand them until their TTL.
		var reply redis.Error
		if !errors.As(err, &reply) || errors.Is(err, ErrNotReplicated) {
			l.releaseOwner(ctx, cfg, g, owner)
		}
		if ctx.Err() != nil {
			return nil, attemptReply{}, join(ErrNotAcquired, ctx.Err())
		}
		return nil, attemptReply{}, err
	}
	var tokens []int64
	var behind int64
	var r attemptReply
	var refused error // the script refused the call: holders of another kind
	if len(g) == 1 {
		tokens, behind, r, refused, err = l.oneReply(ctx, cfg, g[0], res)
		if refused != nil {
			return nil, attemptReply{}, refused // the script wrote nothing
		}
	} else {
		var flag, left int64
		var kind string
		flag, behind, left, kind, tokens, err = parseAcquireAll(res, len(g))
		switch {
		case err != nil:
		case flag == flagMismatch:
			refused = opErr("acquire", g[len(tokens)].name, mismatchError(kind, cfg.mode))
		case flag != flagAcquired:
			r.busy = busyWith(g[len(tokens)].name, left)
		}
	}
	if err != nil {
		l.releaseOwner(ctx, cfg, g, owner)
		return nil, attemptReply{}, err
	}
	locks := make([]*Lock, len(tokens))
	for i, token := range tokens {
		locks[i] = &Lock{
			locker: l, hooks: cfg.hooks, resource: g[i].name, keys: g[i].keys, mode: cfg.mode,
			value: owner + ":" + strconv.FormatInt(token, 10), token: token,
			acquired: sent, behind: time.Duration(behind) * time.Microsecond,
		}
		locks[i].setValidUntil(sent, time.Duration(ms)*time.Millisecond)
	}
	switch {
	case refused != nil:
		return locks, attemptReply{}, refused // the caller frees the locks taken
	case len(locks) == 0:
		return nil, r, nil
	case ctx.Err() != nil:
		l.releaseOwner(ctx, cfg, g, owner)
		return nil, attemptReply{}, join(ErrNotAcquired, ctx.Err())
	case !locks[0].valid():
		// The reply came back after the leases could have run out: the locks may already
		// belong to someone else. Count it as busy; a wait tries again.
		l.releaseOwner(ctx, cfg, g, owner)
		return nil, attemptReply{busy: &BusyError{Resource: g[0].name, Ahead: -1, late: true}}, nil
	}
	return locks, r, nil
}

// oneReply decodes acquire.lua's reply for m: the token taken, or what the script found, or
// refused, the error of a call that the script refused without writing anything (holders of
// another kind, a guard key), or err, a reply no script sends.
func (l *Locker) oneReply(ctx context.Context, cfg *config, m member, res any) (tokens []int64, behind int64, r attemptReply, refused, err error) {
	a, err := parseAcquire(res)
	if err != nil {
		return nil, 0, attemptReply{}, nil, err
	}
	switch a.flag {
	case flagBusy:
		return nil, 0, attemptReply{busy: busyWith(m.name, a.left)}, nil, nil
	case flagQueued:
		return nil, 0, attemptReply{busy: busyWith(m.name, 0), queued: true, held: a.held}, nil, nil
	case flagMismatch:
		return nil, 0, attemptReply{}, mismatchError(a.held, cfg.mode), nil
	case flagGuarded:
		seam.CallFrom(ctx).Guarded = a.held
		return nil, 0, attemptReply{}, join(ErrNotAcquired, seam.ErrGuarded), nil
	}
	return []int64{a.token}, a.behind, attemptReply{}, nil, nil
}

// acquireOne sends acquire.lua for one resource (see its header for the arguments: those
// with their defaults are left out), with the guard key of a seam.Call in ctx, and followed
// by WAIT on the same connection when replicas must acknowledge it.
func (l *Locker) acquireOne(ctx context.Context, cfg *config, k keys, owner string, ms int64, elem, entry string) (any, error) {
	plain := cfg.mode.exclusive() && !cfg.timeFloor && cfg.expiry == 0 && elem == ""
	publish := l.topo.Publish()
	var args []any
	switch {
	case plain && publish == "P":
		args = []any{owner, ms}
	case plain:
		args = []any{owner, ms, publish}
	case elem == "":
		args = []any{owner, ms, publish, cfg.mode.arg(), cfg.floorArg(), cfg.expiryArg()}
	default:
		args = []any{owner, ms, publish, cfg.mode.arg(), cfg.floorArg(), cfg.expiryArg(), elem, entry}
	}
	ks := []string(nil)
	if call := seam.CallFrom(ctx); call != nil && call.GuardKey != "" {
		ks = []string{k.lock, k.fence, k.queue, call.GuardKey}
	}
	if cfg.replicas > 0 {
		if ks == nil {
			ks = k.triple()
		}
		return l.replicated(ctx, cfg, ks, acquireScript, args, func(res any) bool {
			a, err := parseAcquire(res)
			return err == nil && a.flag == flagAcquired
		})
	}
	if ks != nil {
		return acquireScript.run(ctx, l.client, ks, args...).Result()
	}
	return acquireScript.runOn(ctx, l.client, k, args...).Result()
}

// mismatchError is the error of a call of mode want on a resource whose live holders are of
// kind have (as acquire.lua names it: "1", "shared" or a limit), which it cannot join.
func mismatchError(have string, want mode) error {
	switch have {
	case "1":
		have = "exclusive (limit 1)"
	case "shared":
	default:
		have = "limit " + have
	}
	w := want.String()
	if want.exclusive() {
		w += " (limit 1)"
	}
	return invalidf("the resource's live holders are %s, this call %s; a new kind takes effect once the resource is idle", have, w)
}

// replicated runs a script with EVAL on the primary that owns keys[0], followed by WAIT on
// the same connection, and fails with ErrNotReplicated when the script's reply says it wrote
// (wrote) and fewer replicas than cfg.replicas acknowledged it.
func (l *Locker) replicated(ctx context.Context, cfg *config, keys []string, s *script, args []any, wrote func(any) bool) (any, error) {
	res, acks, err := l.pipeWait(ctx, cfg, keys, s, args)
	if _, moved := redis.IsMovedError(err); moved {
		// The slot moved (a failover, resharding): the script did not run. go-redis learns
		// of it only from its own commands, not from a reply inside this pipeline, so reload
		// the slot map and send the pipeline to the new owner.
		l.topo.Refresh(ctx)
		res, acks, err = l.pipeWait(ctx, cfg, keys, s, args)
	}
	if err != nil {
		return nil, err
	}
	if wrote(res) {
		n, err := acks.Result()
		if err != nil {
			return nil, fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err)
		}
		if n < int64(cfg.replicas) {
			return nil, fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, n, cfg.replicas, cfg.replicaTO)
		}
	}
	return res, nil
}

// pipeWait sends a script with EVAL and WAIT in one pipeline to the primary that owns keys[0].
func (l *Locker) pipeWait(ctx context.Context, cfg *config, keys []string, s *script, args []any) (any, *redis.IntCmd, error) {
	node, err := l.topo.Primary(ctx, keys[0])
	if err != nil {
		return nil, nil, err
	}
	// EVAL, not EVALSHA: a NOSCRIPT reply inside the pipeline would cost a second WAIT.
	pipe := node.Pipeline()
	cmd := pipe.Eval(ctx, s.src, keys, args...)
	acks := redis.NewIntCmd(ctx, "wait", cfg.replicas, cfg.replicaTO.Milliseconds())
	_ = pipe.Process(ctx, acks)
	_, _ = pipe.Exec(ctx)
	res, err := cmd.Result()
	return res, acks, err
}

// releaseOwner frees whatever the acquisition of owner holds of g, with a fresh, short
// context: the caller's may be done. Errors are ignored; the leases run out by themselves if
// this fails.
func (l *Locker) releaseOwner(ctx context.Context, cfg *config, g []member, owner string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	ks := make([]keys, len(g))
	values := make([]string, len(g))
	for i, m := range g {
		ks[i], values[i] = m.keys, owner+":"
	}
	l.release(rctx, ks, values, cfg.mode)
}

// triples returns the keys of g's resources as a multi-resource script takes them.
func triples(g []member) []string {
	ks := make([]string, 0, 3*len(g))
	for _, m := range g {
		ks = append(ks, m.keys.lock, m.keys.fence, m.keys.queue)
	}
	return ks
}

// newOwner returns 16 random bytes as unpadded base64url: 22 characters, never ':' or '.'.
func newOwner() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("fencing: owner value: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}
