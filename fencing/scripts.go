package fencing

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, one per verb; each .lua file opens with a comment naming its KEYS and
// ARGV. lib.lua's functions take the place of a script's line "-- #include lib.lua", after
// its fast path, and the constants that Go and Lua share come first, from their Go
// definitions (see assemble). Scripts run with EVALSHA and fall back to EVAL on NOSCRIPT, so
// they survive SCRIPT FLUSH, restarts and failovers.
var (
	//go:embed lib.lua
	libSrc string

	//go:embed acquire.lua
	acquireBody   string
	acquireScript = newScript(acquireBody)

	//go:embed acquireall.lua
	acquireAllBody   string
	acquireAllScript = newScript(acquireAllBody)

	//go:embed release.lua
	releaseBody   string
	releaseScript = newScript(releaseBody)

	//go:embed extend.lua
	extendBody   string
	extendScript = newScript(extendBody)

	//go:embed ttl.lua
	ttlBody   string
	ttlScript = newScript(ttlBody)

	//go:embed inspect.lua
	inspectBody   string
	inspectScript = newScript(inspectBody)

	//go:embed poll.lua
	pollBody   string
	pollScript = newScript(pollBody)
)

// recordTTL is how long Redis keeps the outcome of a release, for a retry of it after a lost
// reply (RECORD_TTL in the scripts).
const recordTTL = 10 * time.Second

// The scripts' reply flags, one numbering for all of them (each script's header says which
// it returns): the first element of an array reply, or the whole reply.
const (
	flagBusy     = 0 // the resource is busy: {0, left} or, from poll, {0, held, left}
	flagAcquired = 1 // taken or still held by this acquisition: {1, token, behind}, or 1 from extend
	flagGranted  = 2 // granted to waiters of the caller's Locker: {2, element, token, ...}
	flagQueued   = 3 // the waiter's element joined the queue: {3, held}
	flagReleased = 4 // released, nothing granted to the caller's Locker
	flagNotHeld  = 5 // this acquisition does not hold the resource
	flagMismatch = 6 // the live holders are of a kind this call cannot join: {6, kind}
	flagGuarded  = 7 // the guard key of a seam.Call exists: {7, its value}
)

// libInclude is the line of a script that lib.lua's text replaces.
const libInclude = "-- #include lib.lua\n"

// assemble returns a script's text: the shared constants, then body with lib.lua's functions
// in place of its include line.
func assemble(body string) string {
	consts := "local ENTRY_TTL, RECORD_TTL = " + strconv.FormatInt(entryTTL.Milliseconds(), 10) +
		", " + strconv.FormatInt(recordTTL.Milliseconds(), 10) + "\n"
	return consts + strings.Replace(body, libInclude, libSrc, 1)
}

// A script is a Lua script with its text and digest boxed once, sent as redis.Script.Run
// would.
type script struct {
	src string
	box any // src, for EVAL
	sha any // its SHA1 digest, for EVALSHA
}

func newScript(body string) *script {
	src := assemble(body)
	return &script{src: src, box: src, sha: redis.NewScript(src).Hash()}
}

// hash returns the script's SHA1 digest.
func (s *script) hash() string { return s.sha.(string) }

// run sends s on keys with args: with EVALSHA, and again with EVAL when Redis does not know
// the script.
func (s *script) run(ctx context.Context, c redis.UniversalClient, keys []string, args ...any) *redis.Cmd {
	res := process(ctx, c, s.command("evalsha", keys, args))
	if noScript(res.Err()) {
		res = process(ctx, c, s.command("eval", keys, args))
	}
	return res
}

// runOn is run on the three keys of one resource, without building a slice of them.
func (s *script) runOn(ctx context.Context, c redis.UniversalClient, k keys, args ...any) *redis.Cmd {
	cmd := make([]any, 0, 6+len(args))
	cmd = append(cmd, "evalsha", s.sha, 3, k.lock, k.fence, k.queue)
	cmd = append(cmd, args...)
	res := process(ctx, c, cmd)
	if noScript(res.Err()) {
		cmd[0], cmd[1] = "eval", s.box
		res = process(ctx, c, cmd)
	}
	return res
}

// command returns the arguments of an EVALSHA (verb "evalsha") or EVAL of s.
func (s *script) command(verb string, keys []string, args []any) []any {
	cmd := make([]any, 0, 3+len(keys)+len(args))
	body := s.sha
	if verb == "eval" {
		body = s.box
	}
	cmd = append(cmd, verb, body, len(keys))
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	return append(cmd, args...)
}

// noScript reports whether err is Redis's answer to an EVALSHA of a script it does not know.
func noScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// process sends an EVAL or EVALSHA command whose keys start at its fourth argument.
func process(ctx context.Context, c redis.UniversalClient, cmd []any) *redis.Cmd {
	res := redis.NewCmd(ctx, cmd...)
	res.SetFirstKeyPos(3)
	_ = c.Process(ctx, res)
	return res
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
		cmds[0] = s.run(ctx, l.client, calls[0].keys, calls[0].args...)
		return cmds
	}
	send := func(verb string, which []int) {
		pipe := l.client.Pipeline()
		for _, i := range which {
			cmd := redis.NewCmd(ctx, s.command(verb, calls[i].keys, calls[i].args)...)
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
	send("evalsha", all)
	var unknown []int
	for i, cmd := range cmds {
		if noScript(cmd.Err()) {
			unknown = append(unknown, i)
		}
	}
	if len(unknown) > 0 {
		send("eval", unknown)
	}
	return cmds
}

// splitValue splits a lock value "<owner>:<token>", with or without the mark '+' of a lock
// with waiters queued (see lib.lua).
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

// grantPairs decodes the grants of a reply {2, element, token, ...} (step 2) or of poll's
// {2, element, token, now, ...} (step 3), from arr[1] on.
func grantPairs(arr []any, step int) ([]grantReply, error) {
	if len(arr) < 1+step || (len(arr)-1)%step != 0 {
		return nil, fmt.Errorf("unexpected reply %v", arr)
	}
	out := make([]grantReply, 0, (len(arr)-1)/step)
	for i := 1; i < len(arr); i += step {
		elem, _ := arr[i].(string)
		token, err := parseToken(arr[i+1])
		if err != nil {
			return nil, err
		}
		g := grantReply{elem: elem, token: token}
		if step == 3 {
			g.now = arr[i+2] == int64(1)
		}
		out = append(out, g)
	}
	return out, nil
}

// grantReply is one grant to a waiter of this Locker that a reply revealed.
type grantReply struct {
	elem  string
	token int64
	now   bool // poll: granted by this call
}

// acquireReply is acquire.lua's reply.
type acquireReply struct {
	flag   int64
	token  int64  // flagAcquired
	left   int64  // flagBusy
	held   string // flagQueued: the exclusive holder's value; flagMismatch: the holders' kind; flagGuarded: the guard's value
	behind int64  // flagAcquired: microseconds the server clock is behind the last token
}

// parseAcquire decodes acquire.lua's reply: the token alone when acquired, or an array led by
// a flag.
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
		a.left, _ = arr[1].(int64)
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

// parseAcquireAll decodes acquireall.lua's reply for n resources; kind is the holders' kind
// of a flagMismatch.
func parseAcquireAll(res any, n int) (flag, behind, left int64, kind string, tokens []int64, err error) {
	arr, _ := res.([]any)
	if len(arr) < 2 {
		return 0, 0, 0, "", nil, errors.New("unexpected reply")
	}
	flag, _ = arr[0].(int64)
	var raw []any
	switch flag {
	case flagAcquired:
		behind, _ = arr[1].(int64)
		raw = arr[2:]
		if len(raw) != n {
			return 0, 0, 0, "", nil, errors.New("unexpected reply: wrong number of tokens")
		}
	case flagBusy, flagMismatch:
		if len(arr) < 3 {
			return 0, 0, 0, "", nil, errors.New("unexpected reply")
		}
		taken, _ := arr[1].(int64)
		left, _ = arr[2].(int64)
		kind, _ = arr[2].(string)
		raw = arr[3:]
		if int64(len(raw)) != taken || taken >= int64(n) {
			return 0, 0, 0, "", nil, errors.New("unexpected reply: wrong number of tokens")
		}
	default:
		return 0, 0, 0, "", nil, errors.New("unexpected reply")
	}
	tokens = make([]int64, len(raw))
	for i, v := range raw {
		if tokens[i], err = parseToken(v); err != nil {
			return 0, 0, 0, "", nil, err
		}
	}
	return flag, behind, left, kind, tokens, nil
}
