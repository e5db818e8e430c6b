package fencing

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/seam"
)

// The Lua scripts. Each .lua file opens with a comment naming its KEYS and ARGV; the scripts
// that can grant a free lock to the next waiter take the functions of grant.lua where their
// line "-- #include grant.lua" stands. Scripts run with EVALSHA and fall back to EVAL on
// NOSCRIPT (redis.Script.Run, or script.run), so they survive SCRIPT FLUSH, restarts and
// failovers. Below them, the calls that run the acquire and release scripts and read their
// replies.
var (
	//go:embed grant.lua
	grantSrc string

	//go:embed acquire.lua
	acquireBody   string
	acquireSrc    = withGrant(acquireBody)
	acquireScript = newScript(acquireSrc)

	//go:embed release.lua
	releaseBody   string
	releaseScript = newScript(withGrant(releaseBody))

	//go:embed acquireall.lua
	acquireAllSrc    string
	acquireAllScript = newScript(acquireAllSrc)

	//go:embed releaseall.lua
	releaseAllSrc    string
	releaseAllScript = newScript(releaseAllSrc)

	//go:embed poll.lua
	pollBody   string
	pollScript = redis.NewScript(withGrant(pollBody))

	//go:embed extend.lua
	extendSrc    string
	extendScript = redis.NewScript(extendSrc)
	// extendAllScript is the same script, for pipelines (LockSet.Extend).
	extendAllScript = newScript(extendSrc)

	//go:embed ttl.lua
	ttlSrc    string
	ttlScript = redis.NewScript(ttlSrc)

	// The scripts of a limited resource (WithLimit(n), n > 1), which take the functions of
	// limit.lua where their line "-- #include limit.lua" stands, after grant.lua's.

	//go:embed limit.lua
	limitSrc string

	//go:embed limit_acquire.lua
	limitAcquireBody   string
	limitAcquireSrc    = withLimit(limitAcquireBody)
	limitAcquireScript = newScript(limitAcquireSrc)

	//go:embed limit_release.lua
	limitReleaseBody   string
	limitReleaseScript = newScript(withLimit(limitReleaseBody))

	//go:embed limit_poll.lua
	limitPollBody   string
	limitPollScript = redis.NewScript(withLimit(limitPollBody))

	//go:embed limit_extend.lua
	limitExtendBody   string
	limitExtendSrc    = withLimit(limitExtendBody)
	limitExtendScript = redis.NewScript(limitExtendSrc)

	//go:embed limit_ttl.lua
	limitTTLBody   string
	limitTTLScript = redis.NewScript(withLimit(limitTTLBody))
)

// The scripts' reply flags, one numbering for all of them (each script's header says which
// it returns): the first element of an array reply, or the whole reply.
const (
	flagBusy     = 0 // another owner holds the lock: {0, pttl} or, from poll, {0, held, pttl}
	flagAcquired = 1 // taken or still held by this acquisition: {1, token, behind}, or 1 from extend
	flagGranted  = 2 // the lock went to a waiter: {2, element, token, ...}
	flagQueued   = 3 // the waiter's element joined the queue: {3, held}
	flagReleased = 4 // the lock was deleted
	flagNotHeld  = 5 // this acquisition does not hold the lock
	flagMismatch = 6 // the resource's live holders use another limit: {6, limit}, or 6 alone
	flagGuarded  = 7 // the guard key of a seam.Call exists: {7, its value}
)

// grantInclude is the line of a script that grant.lua's text replaces.
const grantInclude = "-- #include grant.lua\n"

// limitInclude is the line of a script that limit.lua's text replaces.
const limitInclude = "-- #include limit.lua\n"

// withGrant returns body with grant.lua's functions in place of its include line.
func withGrant(body string) string {
	return strings.Replace(body, grantInclude, grantSrc, 1)
}

// withLimit returns body with the functions of limit.lua and grant.lua in place of their
// include lines.
func withLimit(body string) string {
	return withGrant(strings.Replace(body, limitInclude, limitSrc, 1))
}

// A script is a Lua script on the three keys of grant.lua, sent as redis.Script.Run would,
// with its digest and text boxed once.
type script struct {
	*redis.Script
	src any // the text, for EVAL
	sha any // the SHA1 digest, for EVALSHA
}

func newScript(src string) *script {
	s := redis.NewScript(src)
	return &script{Script: s, src: src, sha: s.Hash()}
}

// run sends s on k's keys with args: with EVALSHA, and again with EVAL when Redis does not
// know the script.
func (s *script) run(ctx context.Context, c redis.UniversalClient, k keys, args ...any) *redis.Cmd {
	cmd := make([]any, 0, 6+len(args))
	cmd = append(cmd, "evalsha", s.sha, 3, k.lock, k.fence, k.queue)
	cmd = append(cmd, args...)
	res := process(ctx, c, cmd)
	if err := res.Err(); err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
		eval := slices.Clone(cmd)
		eval[0], eval[1] = "eval", s.src
		res = process(ctx, c, eval)
	}
	return res
}

// runKeys sends s on any number of keys with args, as run does.
func (s *script) runKeys(ctx context.Context, c redis.UniversalClient, ks []string, args ...any) *redis.Cmd {
	cmd := make([]any, 0, 3+len(ks)+len(args))
	cmd = append(cmd, "evalsha", s.sha, len(ks))
	for _, k := range ks {
		cmd = append(cmd, k)
	}
	cmd = append(cmd, args...)
	res := process(ctx, c, cmd)
	if err := res.Err(); err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
		eval := slices.Clone(cmd)
		eval[0], eval[1] = "eval", s.src
		res = process(ctx, c, eval)
	}
	return res
}

// process sends an EVAL or EVALSHA command whose keys start at its fourth argument.
func process(ctx context.Context, c redis.UniversalClient, cmd []any) *redis.Cmd {
	res := redis.NewCmd(ctx, cmd...)
	res.SetFirstKeyPos(3)
	_ = c.Process(ctx, res)
	return res
}

// lateReply is attempt's "holder TTL" when the acquire succeeded but its reply came back
// after the lease could have run out.
const lateReply time.Duration = -1

// attemptReply is what attempt learnt when it did not take the lock.
type attemptReply struct {
	pttl time.Duration // busy: the holder's remaining TTL (lateReply when the lease lapsed in transit)
	held string        // queued: the lock value the script saw, "" when none
}

// attempt runs the acquire script once. When elem is set and the resource is busy, the script
// appends elem to the resource's queue, and writes entry to the Locker's waiter key unless
// entry is "" (see acquire.lua). It returns the lock, or nil and what the script saw, or an
// error.
func (l *Locker) attempt(ctx context.Context, cfg *config, resource string, k keys, elem, entry string) (*Lock, attemptReply, error) {
	owner, err := newOwner()
	if err != nil {
		return nil, attemptReply{}, err
	}
	ms := millis(cfg.ttl)
	args := []any{owner, ms, cfg.opts(l.waits.publish)}
	if k.limit > 1 {
		args = append(args, strconv.Itoa(k.limit))
	}
	if elem != "" {
		args = append(args, elem, entry)
	}
	sent := time.Now()
	var res any
	if call := seam.CallFrom(ctx); call != nil && call.GuardKey != "" {
		res, err = l.runGuarded(ctx, cfg, k, call.GuardKey, args)
	} else {
		res, err = l.runAcquire(ctx, cfg, k, args)
	}
	if err != nil {
		// Unless Redis answered with an error (the script failed), it may have run and
		// left us holding the lock: free it rather than strand it until its TTL.
		var reply redis.Error
		if !errors.As(err, &reply) || errors.Is(err, ErrNotReplicated) {
			l.releaseOwner(ctx, k, owner)
		} else if k.limit <= 1 && isWrongType(err) {
			// acquire.lua found a hash: the slots of a limited resource. It wrote nothing.
			return nil, attemptReply{}, opErr("acquire", resource, l.mismatch(ctx, k, 1))
		}
		if ctx.Err() != nil {
			return nil, attemptReply{}, join(ErrNotAcquired, ctx.Err())
		}
		return nil, attemptReply{}, opErr("acquire", resource, err)
	}
	a, err := parseAcquire(res)
	if err != nil {
		return nil, attemptReply{}, opErr("acquire", resource, err)
	}
	switch a.flag {
	case flagBusy:
		return nil, attemptReply{pttl: time.Duration(a.pttl) * time.Millisecond}, nil
	case flagQueued:
		return nil, attemptReply{held: a.held}, nil
	case flagMismatch:
		return nil, attemptReply{}, opErr("acquire", resource, mismatchError(a.held, k.limit))
	case flagGuarded:
		seam.CallFrom(ctx).Guarded = a.held
		return nil, attemptReply{}, opErr("acquire", resource, join(ErrNotAcquired, seam.ErrGuarded))
	}
	lock := &Lock{
		locker:   l,
		hooks:    cfg.hooks,
		resource: resource,
		keys:     k,
		value:    owner + ":" + strconv.FormatInt(a.token, 10),
		token:    a.token,
		acquired: sent,
		behind:   time.Duration(a.behind) * time.Microsecond,
	}
	lock.setValidUntil(sent, time.Duration(ms)*time.Millisecond)
	if err := ctx.Err(); err != nil {
		l.releaseOwner(ctx, k, owner)
		return nil, attemptReply{}, join(ErrNotAcquired, err)
	}
	if !lock.valid() {
		// The reply came back after the lease could have run out: the lock may already
		// belong to someone else. Count it as busy; Acquire tries again.
		l.releaseOwner(ctx, k, owner)
		return nil, attemptReply{pttl: lateReply}, nil
	}
	return lock, attemptReply{}, nil
}

// mismatchError is the error of a call that asks for limit want on a resource whose live
// holders use limit have.
func mismatchError(have string, want int) error {
	return invalidf("the resource's live holders use limit %s, this call limit %d; a new limit takes effect once the resource is idle", have, max(want, 1))
}

// mismatch returns the error of a call that asks for limit want on a resource whose lock key
// is a limited resource's hash, naming the limit that the hash records.
func (l *Locker) mismatch(ctx context.Context, k keys, want int) error {
	have, err := l.client.HGet(ctx, k.lock, "limit").Result()
	if err != nil {
		have = "above 1"
	}
	return mismatchError(have, want)
}

// isWrongType reports whether err is Redis's WRONGTYPE error: a script of limit 1 met the
// hash of a limited resource.
func isWrongType(err error) bool {
	return err != nil && strings.Contains(err.Error(), "WRONGTYPE")
}

// runAcquire sends the acquire script with args, followed by WAIT on the same connection when
// replicas must acknowledge it.
func (l *Locker) runAcquire(ctx context.Context, cfg *config, k keys, args []any) (any, error) {
	script, src := acquireScript, acquireSrc
	if k.limit > 1 {
		script, src = limitAcquireScript, limitAcquireSrc
	}
	if cfg.replicas == 0 {
		return script.run(ctx, l.client, k, args...).Result()
	}
	return l.replicated(ctx, cfg, k, src, args, func(res any) bool {
		a, err := parseAcquire(res)
		return err == nil && a.flag == flagAcquired
	})
}

// runGuarded sends the acquire script with a guard key (see seam.Call) as its fourth key.
func (l *Locker) runGuarded(ctx context.Context, cfg *config, k keys, guard string, args []any) (any, error) {
	if k.limit > 1 || cfg.replicas > 0 {
		return nil, invalidf("a guard key works with the exclusive lock without WithReplicas")
	}
	return acquireScript.runKeys(ctx, l.client, []string{k.lock, k.fence, k.queue, guard}, args...).Result()
}

// replicated runs a script with EVAL on the primary that owns k, followed by WAIT on the same
// connection, and fails with ErrNotReplicated when the script's reply says it wrote (wrote)
// and fewer replicas than cfg.replicas acknowledged it.
func (l *Locker) replicated(ctx context.Context, cfg *config, k keys, src string, args []any, wrote func(any) bool) (any, error) {
	res, acks, err := l.pipeWait(ctx, cfg, k, src, args)
	if c, ok := l.client.(*redis.ClusterClient); ok && isMoved(err) {
		// The slot moved (a failover, resharding): the script did not run. go-redis learns
		// of it only from its own commands, not from a reply inside this pipeline, so reload
		// the slot map and send the pipeline to the new owner.
		clusterRoute{c}.refresh(ctx)
		res, acks, err = l.pipeWait(ctx, cfg, k, src, args)
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

// isMoved reports whether err is a Cluster's MOVED reply.
func isMoved(err error) bool {
	_, moved := redis.IsMovedError(err)
	return moved
}

// pipeWait sends a script with EVAL and WAIT in one pipeline to the primary that owns k.
func (l *Locker) pipeWait(ctx context.Context, cfg *config, k keys, src string, args []any) (any, *redis.IntCmd, error) {
	var node redis.Cmdable
	switch c := l.client.(type) {
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, k.lock)
		if err != nil {
			return nil, nil, err
		}
		node = n
	case *redis.Client:
		node = c
	default:
		return nil, nil, invalidf("WithReplicas needs a *redis.Client or *redis.ClusterClient, not %T", l.client)
	}
	// EVAL, not EVALSHA: a NOSCRIPT reply inside the pipeline would cost a second WAIT.
	pipe := node.Pipeline()
	cmd := pipe.Eval(ctx, src, k.script(), args...)
	acks := redis.NewIntCmd(ctx, "wait", cfg.replicas, cfg.replicaTO.Milliseconds())
	_ = pipe.Process(ctx, acks)
	_, _ = pipe.Exec(ctx)
	res, err := cmd.Result()
	return res, acks, err
}

// releaseOwner deletes the lock if owner holds it, whatever its token, with a fresh, short
// context: the caller's may be done. Errors are ignored; the lease runs out by itself if this
// fails.
func (l *Locker) releaseOwner(ctx context.Context, k keys, owner string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = l.release(rctx, k, owner+":", nil)
}

// release runs the release script for a lock value, or for "<owner>:" (any token of owner).
// It reports whether that value held the lock. A grant of the lock to this Locker's own
// waiters, which the script returns instead of announcing, is delivered to them.
func (l *Locker) release(ctx context.Context, k keys, value string, before func(redis.Pipeliner)) (bool, error) {
	sent := time.Now()
	args := l.releaseArgs(k, value)
	limited := k.limit > 1
	script := releaseScript
	if limited {
		script = limitReleaseScript
	}
	var res any
	var err error
	if before != nil {
		res, err = l.pipeRelease(ctx, script, k, args, before)
	} else {
		res, err = script.run(ctx, l.client, k, args...).Result()
	}
	// The other kind of lock holds the key (a grant passed on by a Locker that does not know
	// the resource's limit, or a call of another limit): try its script.
	switch {
	case !limited && isWrongType(err):
		limited = true
		res, err = limitReleaseScript.run(ctx, l.client, k, args...).Result()
	case limited && err == nil && res == int64(flagMismatch):
		limited = false
		res, err = releaseScript.run(ctx, l.client, k, args...).Result()
	}
	if err != nil {
		return false, err
	}
	if limited {
		// Other holders may have tokens above this one: the release dates no grant but its
		// own (see waiting.saw).
		value = ""
	}
	return l.releaseReply(k, sent, value, res)
}

// pipeRelease sends the commands of before and the release script in one pipeline, and the
// script again with EVAL when Redis did not know it.
func (l *Locker) pipeRelease(ctx context.Context, s *script, k keys, args []any, before func(redis.Pipeliner)) (any, error) {
	pipe := l.client.Pipeline()
	before(pipe)
	cmd := redis.NewCmd(ctx, append([]any{"evalsha", s.sha, 3, k.lock, k.fence, k.queue}, args...)...)
	cmd.SetFirstKeyPos(3)
	_ = pipe.Process(ctx, cmd)
	_, _ = pipe.Exec(ctx)
	if err := cmd.Err(); err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
		return s.run(ctx, l.client, k, args...).Result()
	}
	return cmd.Result()
}

// releaseArgs returns the release script's arguments for a lock value (see release).
func (l *Locker) releaseArgs(k keys, value string) []any {
	ws := l.waits
	args := []any{value, l.cfg.opts(ws.publish)}
	if ws.queuedOn(k.channel) {
		args = append(args, ws.id)
	}
	return args
}

// releaseReply decodes the release script's reply to a call sent at sent and delivers a
// grant to this Locker's own waiters (see release).
func (l *Locker) releaseReply(k keys, sent time.Time, value string, res any) (bool, error) {
	var err error
	var elem string
	var token int64
	switch r := res.(type) {
	case int64:
		switch r {
		case flagNotHeld:
			return false, nil
		case flagReleased:
		default:
			return false, fmt.Errorf("unexpected reply %v", res)
		}
	case []any:
		if len(r) != 3 || r[0] != int64(flagGranted) {
			return false, fmt.Errorf("unexpected reply %v", res)
		}
		elem, _ = r[1].(string)
		if token, err = parseToken(r[2]); err != nil {
			return true, err
		}
	default:
		return false, fmt.Errorf("unexpected reply %v", res)
	}
	l.waits.released(k, sent, value, elem, token)
	if elem != "" {
		// The grant went to a waiter of this Locker, now runnable: let it run before this
		// goroutine goes on, which would otherwise delay the next holder's start by its own
		// work until it blocks (docs/benchmarks.md, "The hand-off's own floor").
		runtime.Gosched()
	}
	return true, nil
}

// releaseTimeout bounds releases made with a fresh context.
const releaseTimeout = 5 * time.Second

// splitValue splits a lock value "<owner>:<token>", with or without the mark '+' of a lock
// with waiters queued (see grant.lua).
func splitValue(v string) (owner string, token int64, ok bool) {
	v = strings.TrimSuffix(v, "+")
	i := strings.LastIndexByte(v, ':')
	if i < 0 {
		return "", 0, false
	}
	token, err := strconv.ParseInt(v[i+1:], 10, 64)
	return v[:i], token, err == nil && token > 0
}

// parseToken decodes a token that a script returned as a string.
func parseToken(v any) (int64, error) {
	s, _ := v.(string)
	token, err := strconv.ParseInt(s, 10, 64)
	if err != nil || token <= 0 {
		return 0, fmt.Errorf("bad token %q in reply", s)
	}
	return token, nil
}

// acquireReply is the acquire script's reply.
type acquireReply struct {
	flag   int64
	token  int64  // flagAcquired
	pttl   int64  // flagBusy
	held   string // flagQueued; flagMismatch: the limit the live holders use
	behind int64  // flagAcquired: microseconds the server clock is behind the last token
}

// parseAcquire decodes the acquire script's reply: the token alone when acquired, or an
// array led by a flag.
func parseAcquire(res any) (acquireReply, error) {
	if s, ok := res.(string); ok {
		token, err := parseToken(s)
		return acquireReply{flag: flagAcquired, token: token}, err
	}
	arr, _ := res.([]any)
	if len(arr) < 2 {
		return acquireReply{}, fmt.Errorf("unexpected reply %v", res)
	}
	var a acquireReply
	a.flag, _ = arr[0].(int64)
	switch a.flag {
	case flagBusy:
		a.pttl, _ = arr[1].(int64)
	case flagQueued, flagMismatch, flagGuarded:
		a.held, _ = arr[1].(string)
	case flagAcquired:
		token, err := parseToken(arr[1])
		if err != nil {
			return acquireReply{}, err
		}
		a.token = token
		if len(arr) > 2 {
			a.behind, _ = arr[2].(int64)
		}
	default:
		return acquireReply{}, fmt.Errorf("unexpected reply %v", res)
	}
	return a, nil
}

// newOwner returns 16 random bytes as unpadded base64url: 22 characters, never ':'.
func newOwner() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("fencing: owner value: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}
