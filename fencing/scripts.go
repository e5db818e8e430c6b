package fencing

import (
	"context"
	_ "embed"
	"errors"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts. Each .lua file opens with a comment naming its KEYS and ARGV; the scripts
// that can grant a free lock to the next waiter take the functions of grant.lua where their
// line "-- #include grant.lua" stands. Scripts run with EVALSHA and fall back to EVAL on
// NOSCRIPT (redis.Script.Run, or script.run), so they survive SCRIPT FLUSH, restarts and
// failovers.
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
)

// grantInclude is the line of a script that grant.lua's text replaces.
const grantInclude = "-- #include grant.lua\n"

// withGrant returns body with grant.lua's functions in place of its include line.
func withGrant(body string) string {
	return strings.Replace(body, grantInclude, grantSrc, 1)
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
