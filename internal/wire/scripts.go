package wire

import (
	"context"
	_ "embed"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The scripts, one per verb (see each .lua file's header for its KEYS, ARGV and replies).
var (
	//go:embed grants.lua
	grantsSrc string

	//go:embed acquire.lua
	acquireSrc string
	// Acquire takes one resource, or queues for it.
	Acquire = newScript(acquireSrc)

	//go:embed acquireall.lua
	acquireAllSrc string
	// AcquireAll takes the exclusive locks of several resources of one server or slot.
	AcquireAll = newScript(acquireAllSrc)

	//go:embed release.lua
	releaseSrc string
	// Release releases one or several resources and grants them to their waiters.
	Release = newScript(releaseSrc)

	//go:embed extend.lua
	extendSrc string
	// Extend resets one holder's lease.
	Extend = newScript(extendSrc)

	//go:embed ttl.lua
	ttlSrc string
	// TTL reads one holder's lease.
	TTL = newScript(ttlSrc)

	//go:embed poll.lua
	pollSrc string
	// Poll keeps a Locker's waiters queued and finds their grants.
	Poll = newScript(pollSrc)

	//go:embed inspect.lua
	inspectSrc string
	// Inspect reads a resource's holders, counter and queue.
	Inspect = newScript(inspectSrc)
)

// include is the line of a script that grants.lua's text replaces.
const include = "-- #include grants.lua\n"

// A Script is one script, its text and digest boxed once, sent as redis.Script.Run would.
type Script struct {
	src string
	box any // src, for EVAL
	sha any // its SHA1 digest, for EVALSHA
}

func newScript(body string) *Script {
	body = strings.Replace(body, include, grantsSrc, 1)
	src := header(body) + body
	return &Script{src: src, box: src, sha: redis.NewScript(src).Hash()}
}

// Source returns the script's text, as Redis runs it.
func (s *Script) Source() string { return s.src }

// Hash returns the script's SHA1 digest.
func (s *Script) Hash() string { return s.sha.(string) }

// Is reports whether body, the second argument of an EVAL or EVALSHA, is s.
func (s *Script) Is(body any) bool { return body == s.sha || body == s.box }

// Run sends s on keys with args: with EVALSHA, and again with EVAL when Redis does not know
// the script.
func (s *Script) Run(ctx context.Context, c redis.UniversalClient, keys []string, args ...any) *redis.Cmd {
	cmd := s.Command("evalsha", keys, args)
	res := process(ctx, c, cmd)
	if NoScript(res.Err()) {
		cmd[1] = s.box
		cmd[0] = "eval"
		res = process(ctx, c, cmd)
	}
	return res
}

// RunOn is Run on the keys of one resource, without a slice of them: its lock key, and on a
// Redis Cluster also its fence and queue keys and, when memo is not "", the key of its memo
// memo (see Declare).
func (s *Script) RunOn(ctx context.Context, c redis.UniversalClient, k Keys, memo string, args ...any) *redis.Cmd {
	if _, ok := c.(*redis.ClusterClient); !ok {
		cmd := make([]any, 0, 4+len(args))
		cmd = append(cmd, "evalsha", s.sha, 1, k.Lock)
		return s.send(ctx, c, append(cmd, args...))
	}
	cmd := make([]any, 0, 7+len(args))
	if memo == "" {
		cmd = append(cmd, "evalsha", s.sha, 3, k.Lock, k.Fence, k.Queue)
	} else {
		cmd = append(cmd, "evalsha", s.sha, 4, k.Lock, k.Fence, k.Queue, k.Memo(memo))
	}
	return s.send(ctx, c, append(cmd, args...))
}

// Declare returns the KEYS of a script on the resources of ks: their lock keys, which are all
// the scripts read from KEYS (their other keys' names follow from the lock key's) and, on a
// *redis.ClusterClient, after them each resource's fence and queue keys, and the key of memo
// when it is not "" (ks then has one resource). A Cluster checks declared keys before it runs
// a script: while their slot migrates and some of them have moved, it answers TRYAGAIN
// instead of running the script on a node that lacks the counter, which would issue a token
// again from 1. A script's KEYS are its lock keys up to the first key that is not one.
func Declare(c redis.UniversalClient, ks []Keys, memo string) []string {
	_, cluster := c.(*redis.ClusterClient)
	n := len(ks)
	if cluster {
		n = 3*len(ks) + 1
	}
	keys := make([]string, 0, n)
	for _, k := range ks {
		keys = append(keys, k.Lock)
	}
	if cluster {
		for _, k := range ks {
			keys = append(keys, k.Fence, k.Queue)
		}
		if memo != "" && len(ks) == 1 {
			keys = append(keys, ks[0].Memo(memo))
		}
	}
	return keys
}

// send sends the EVALSHA cmd, and again as an EVAL when Redis does not know the script.
func (s *Script) send(ctx context.Context, c redis.UniversalClient, cmd []any) *redis.Cmd {
	res := process(ctx, c, cmd)
	if NoScript(res.Err()) {
		cmd[0], cmd[1] = "eval", s.box
		res = process(ctx, c, cmd)
	}
	return res
}

// Command returns the arguments of an EVALSHA (verb "evalsha") or EVAL of s.
func (s *Script) Command(verb string, keys []string, args []any) []any {
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

// NoScript reports whether err is Redis's answer to an EVALSHA of a script it does not know.
func NoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// process sends an EVAL or EVALSHA command, whose keys start at its fourth argument.
func process(ctx context.Context, c redis.UniversalClient, cmd []any) *redis.Cmd {
	res := redis.NewCmd(ctx, cmd...)
	res.SetFirstKeyPos(3)
	_ = c.Process(ctx, res)
	return res
}

// Pipe runs s once per call, with EVALSHA in one pipeline (one round trip per server), then
// the calls that Redis answered with NOSCRIPT again with EVAL, in a second pipeline.
func (s *Script) Pipe(ctx context.Context, c redis.UniversalClient, calls []Call) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	if len(calls) == 1 {
		cmds[0] = s.Run(ctx, c, calls[0].Keys, calls[0].Args...)
		return cmds
	}
	send := func(verb string, which []int) {
		pipe := c.Pipeline()
		for _, i := range which {
			cmd := redis.NewCmd(ctx, s.Command(verb, calls[i].Keys, calls[i].Args)...)
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
		if NoScript(cmd.Err()) {
			unknown = append(unknown, i)
		}
	}
	if len(unknown) > 0 {
		send("eval", unknown)
	}
	return cmds
}

// A Call is one run of a script: its keys and arguments.
type Call struct {
	Keys []string
	Args []any
}
