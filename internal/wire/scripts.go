package wire

import (
	"context"
	"embed"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The scripts' reply codes, one numbering for all (see their headers): a reply, or its first item.
const (
	Busy     = 0 // busy: {Busy, left}; from the poll script {Busy, held, left}
	Taken    = 1 // taken, or still held: {Taken, token, behind}; Extend's Taken; TTL's {Taken, left}
	Granted  = 2 // granted to waiters of the caller's Locker: {Granted, element, token, ...}
	Queued   = 3 // the waiter's element is in the queue: {Queued, held}
	Released = 4 // released, nothing granted to the caller's Locker
	NotHeld  = 5 // this acquisition does not hold the resource
	Mismatch = 6 // the live holders are of a kind this call cannot join: {Mismatch, kind}
	Layout   = 7 // the lock is a hash of the earlier layout: {Layout}
	Memoed   = 8 // the memo the call names exists: {Memoed, value}
)

const (
	// EntryTTL is how long a waiter key and the queue outlive their last renewal.
	EntryTTL = 3 * time.Second
	// RecordTTL is how long Redis keeps a release's outcome, for a retry after a lost reply.
	RecordTTL = 10 * time.Second
	// hashMeta is the number of a hash's fields that are not holders: k, q, e, x, t.
	hashMeta = 5
)

// constants are the Lua locals a script may start with, from the Go definitions above (the
// lifetimes as strings, which Redis takes as they are, where it would format a Lua number).
var constants = []struct{ name, value string }{
	{"BUSY", strconv.Itoa(Busy)}, {"TAKEN", strconv.Itoa(Taken)}, {"GRANTED", strconv.Itoa(Granted)},
	{"QUEUED", strconv.Itoa(Queued)}, {"RELEASED", strconv.Itoa(Released)}, {"NOT_HELD", strconv.Itoa(NotHeld)},
	{"MISMATCH", strconv.Itoa(Mismatch)}, {"LAYOUT", strconv.Itoa(Layout)}, {"MEMO", strconv.Itoa(Memoed)},
	{"META", strconv.Itoa(hashMeta)}, {"ENTRY_TTL", "'" + strconv.FormatInt(EntryTTL.Milliseconds(), 10) + "'"},
	{"RECORD_TTL", "'" + strconv.FormatInt(RecordTTL.Milliseconds(), 10) + "'"},
}

//go:embed *.lua
var sources embed.FS

// The scripts, one per verb and kind (each file's header names its KEYS, ARGV and replies).
var (
	acquireScript       = load("acquire.lua")
	sharedAcquireScript = load("shared_acquire.lua")
	acquireAllScript    = load("acquireall.lua")
	releaseScript       = load("release.lua")
	sharedReleaseScript = load("shared_release.lua")
	extendScript        = load("extend.lua")
	sharedExtendScript  = load("shared_extend.lua")
	pollScript          = load("poll.lua")
	inspectScript       = load("inspect.lua")
)

// Scripts are the scripts by file name, for tests that spot or load them.
var Scripts = map[string]*Script{
	"acquire.lua": acquireScript, "shared_acquire.lua": sharedAcquireScript, "acquireall.lua": acquireAllScript,
	"release.lua": releaseScript, "shared_release.lua": sharedReleaseScript, "extend.lua": extendScript,
	"shared_extend.lua": sharedExtendScript, "poll.lua": pollScript, "inspect.lua": inspectScript,
}

// A Script is one script, its text and digest boxed once, sent as redis.Script.Run would.
type Script struct {
	name string
	src  string
	box  any // src, for EVAL
	sha  any // its SHA1 digest, for EVALSHA
}

// load returns the script of file name, expanded, after a line declaring the constants it names.
func load(name string) *Script {
	body := expand(name)
	src := header(body) + body
	return &Script{name: name, src: src, box: src, sha: redis.NewScript(src).Hash()}
}

// expand returns the text of file name with each line "-- #include <file>" replaced by its text.
func expand(name string) string {
	b, err := sources.ReadFile(name)
	if err != nil {
		panic("wire: no script " + name) // the embedded files are fixed at build time
	}
	lines := strings.SplitAfter(string(b), "\n")
	for i, line := range lines {
		if file, ok := strings.CutPrefix(strings.TrimSpace(line), "-- #include "); ok {
			lines[i] = expand(file)
		}
	}
	return strings.Join(lines, "")
}

// header returns the line that declares the constants body names (each costs a step per call).
func header(body string) string {
	var names, values []string
	for _, c := range constants {
		if strings.Contains(body, c.name) {
			names, values = append(names, c.name), append(values, c.value)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return "local " + strings.Join(names, ", ") + " = " + strings.Join(values, ", ") + "\n"
}

// Name returns the script's file name.
func (s *Script) Name() string { return s.name }

// Source returns the script's text, as Redis runs it.
func (s *Script) Source() string { return s.src }

// Hash returns the script's SHA1 digest.
func (s *Script) Hash() string { return s.sha.(string) }

// Is reports whether body, the second argument of an EVAL or EVALSHA, is s.
func (s *Script) Is(body any) bool { return body == s.sha || body == s.box }

// Run sends s on keys with args: with EVALSHA, then with EVAL when Redis does not know it.
func (s *Script) Run(ctx context.Context, c redis.UniversalClient, keys []string, args ...any) *redis.Cmd {
	return s.send(ctx, c, s.command("evalsha", keys, args))
}

// send sends cmd, an EVALSHA of s, and again as an EVAL when Redis does not know s.
func (s *Script) send(ctx context.Context, c redis.UniversalClient, cmd []any) *redis.Cmd {
	res := evalCmd(ctx, cmd)
	_ = c.Process(ctx, res)
	if NoScript(res.Err()) {
		cmd[0], cmd[1] = "eval", s.box
		res = evalCmd(ctx, cmd)
		_ = c.Process(ctx, res)
	}
	return res
}

// command returns the arguments of an EVALSHA (verb "evalsha") or EVAL of s.
func (s *Script) command(verb string, keys []string, args []any) []any {
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

// evalCmd returns the command of an EVAL or EVALSHA, whose keys start at its fourth argument.
func evalCmd(ctx context.Context, args []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// NoScript reports whether err is Redis's answer to an EVALSHA of a script it does not know.
func NoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// Pipe runs each call with EVALSHA in one pipeline, then those answered NOSCRIPT with EVAL.
func Pipe(ctx context.Context, c redis.UniversalClient, calls []Call) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	if len(calls) == 1 {
		cmds[0] = calls[0].Script.Run(ctx, c, calls[0].Keys, calls[0].Args...)
		return cmds
	}
	send := func(verb string) {
		pipe := c.Pipeline()
		for i, call := range calls {
			if cmds[i] == nil || NoScript(cmds[i].Err()) {
				cmds[i] = evalCmd(ctx, call.Script.command(verb, call.Keys, call.Args))
				_ = pipe.Process(ctx, cmds[i])
			}
		}
		_, _ = pipe.Exec(ctx)
	}
	send("evalsha")
	if slices.ContainsFunc(cmds, func(cmd *redis.Cmd) bool { return NoScript(cmd.Err()) }) {
		send("eval")
	}
	return cmds
}

// A Call is one run of a script: the script, its keys and its arguments.
type Call struct {
	Script *Script
	Keys   []string
	Args   []any
}

// Run sends the call (see Script.Run).
func (c Call) Run(ctx context.Context, client redis.UniversalClient) *redis.Cmd {
	return c.Script.Run(ctx, client, c.Keys, c.Args...)
}

// Declare returns the KEYS of a script on the resources of ks: their lock keys (the scripts
// count them up to the first key that is not one, and name the others after them) and, on a
// *redis.ClusterClient, each one's fence and queue keys and the key of memo when not "" (ks then
// has one resource). A Cluster checks declared keys: while their slot migrates it answers
// TRYAGAIN rather than run a script without the counter, which would issue tokens from 1 again.
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
