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

	//go:embed poll.lua
	pollBody   string
	pollScript = redis.NewScript(withGrant(pollBody))

	//go:embed extend.lua
	extendSrc    string
	extendScript = redis.NewScript(extendSrc)

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

// A script is a Lua script of the uncontended path, whose commands the caller builds (see
// command) so that the arguments that do not change, the command's name, the digest and the
// keys, are boxed once rather than on every call.
type script struct {
	*redis.Script
	src any // the text, for EVAL
	sha any // the SHA1 digest, for EVALSHA
}

func newScript(src string) *script {
	s := redis.NewScript(src)
	return &script{Script: s, src: src, sha: s.Hash()}
}

// command returns an EVALSHA command of s on the three keys of grant.lua, boxed (see
// keys.args), with room for n arguments, to be appended, and sent by run.
func (s *script) command(ka [3]any, n int) []any {
	cmd := make([]any, 6, 6+n)
	cmd[0], cmd[1], cmd[2] = "evalsha", s.sha, len(ka)
	copy(cmd[3:], ka[:])
	return cmd
}

// run sends cmd, made by command, as redis.Script.Run would: with EVALSHA, and again with
// EVAL, on a copy of cmd, when Redis does not know the script. cmd is not modified.
func (s *script) run(ctx context.Context, c redis.UniversalClient, cmd []any) *redis.Cmd {
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
