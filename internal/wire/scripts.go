package wire

import (
	"context"
	"embed"
	"errors"
	"fmt"
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

// The calls of the scripts: one type per verb, whose Run sends it and reads its reply.

// trimmed returns args without its trailing arguments equal to defaults, the last ones' own.
func trimmed(args []any, defaults ...any) []any {
	n, d := len(args), len(defaults)
	for n > 0 && d > 0 && args[n-1] == defaults[d-1] {
		n, d = n-1, d-1
	}
	return args[:n]
}

// runOn runs s with args on the keys of one resource (see Declare), as Script.Run does.
func runOn(ctx context.Context, c redis.UniversalClient, s *Script, k Keys, memo string, args []any) *redis.Cmd {
	cmd := make([]any, 0, 7+len(args))
	if _, cluster := c.(*redis.ClusterClient); !cluster {
		cmd = append(cmd, "evalsha", s.sha, 1, k.Lock)
	} else if memo == "" {
		cmd = append(cmd, "evalsha", s.sha, 3, k.Lock, k.Fence, k.Queue)
	} else {
		cmd = append(cmd, "evalsha", s.sha, 4, k.Lock, k.Fence, k.Queue, k.Memo(memo))
	}
	return s.send(ctx, c, append(cmd, args...))
}

// An Acquire takes one resource, or queues for it: acquire.lua, or shared_acquire.lua.
type Acquire struct {
	Keys    Keys
	Owner   string // random per acquisition (with its label, see Labeled)
	Lease   int64  // milliseconds
	Kind    Kind
	Element string // the waiter's queue element, queued when the resource is busy; "": one attempt
	Entry   string // the Locker's waiter value (WaiterValue); "" when known to be fresh
	Publish string // how grants are announced: "P" (PUBLISH), "S" (SPUBLISH) or "-" (none)
	Floor   bool   // tokens at or above the server clock in microseconds
	Expiry  int64  // the counter's expiry in milliseconds; 0: none
	Memo    string // a memo's name: when it exists, nothing is taken; "": none
}

// Call returns the call of a's script: its keys on c and its arguments.
func (a *Acquire) Call(c redis.UniversalClient) Call {
	s, args := a.call()
	return Call{Script: s, Keys: Declare(c, []Keys{a.Keys}, a.Memo), Args: args}
}

// call returns a's script and arguments; the shared script's kind is the third.
func (a *Acquire) call() (*Script, []any) {
	s, args := acquireScript, make([]any, 0, 8)
	args = append(args, a.Owner, a.Lease)
	if !a.Kind.Exclusive() {
		s, args = sharedAcquireScript, append(args, a.Kind.Arg())
	}
	args = append(args, Rules(a.Floor, time.Duration(a.Expiry)*time.Millisecond), a.Element, a.Entry, a.Publish, a.Memo)
	return s, trimmed(args, "", "", "", "P", "")
}

// Run sends a and reads its reply.
func (a *Acquire) Run(ctx context.Context, c redis.UniversalClient) (AcquireReply, error) {
	s, args := a.call()
	res, err := runOn(ctx, c, s, a.Keys, a.Memo, args).Result()
	if err != nil {
		return AcquireReply{}, err
	}
	return ParseAcquire(res)
}

// An AcquireReply is an acquire script's reply.
type AcquireReply struct {
	Code   int64
	Token  int64  // Taken
	Behind int64  // Taken: microseconds the server clock was behind the last token
	Left   int64  // Busy, Queued: milliseconds until the holders let the resource change hands; Queued: -1 when not said
	Held   string // Queued: the exclusive holder's lock value, or ""; Mismatch: the holders' kind; Memoed: the memo
}

// ParseAcquire reads an acquire script's reply: the token alone, or an array led by a code.
func ParseAcquire(res any) (AcquireReply, error) {
	if s, ok := res.(string); ok {
		token, err := parseToken(s)
		return AcquireReply{Code: Taken, Token: token}, err
	}
	arr, _ := res.([]any)
	if len(arr) < 1 {
		return AcquireReply{}, unexpected(res)
	}
	a := AcquireReply{Left: -1}
	a.Code, _ = arr[0].(int64)
	switch {
	case a.Code == Layout:
	case len(arr) < 2:
		return AcquireReply{}, unexpected(res)
	case a.Code == Busy:
		a.Left, _ = arr[1].(int64)
	case a.Code == Queued:
		a.Held, _ = arr[1].(string)
		if len(arr) > 2 {
			a.Left, _ = arr[2].(int64)
		}
	case a.Code == Mismatch, a.Code == Memoed:
		a.Held, _ = arr[1].(string)
	case a.Code == Taken:
		token, err := parseToken(arr[1])
		if err != nil {
			return AcquireReply{}, err
		}
		a.Token = token
		if len(arr) > 2 {
			a.Behind, _ = arr[2].(int64)
		}
	default:
		return AcquireReply{}, unexpected(res)
	}
	return a, nil
}

// An AcquireAll (acquireall.lua) takes one server's or slot's exclusive locks up to a busy one.
type AcquireAll struct {
	Keys    []Keys
	Owner   string
	Lease   int64
	Floor   bool
	Expiry  int64
	Publish string // as in Acquire: the queues are served first
}

// Call returns the call of a's script on c.
func (a *AcquireAll) Call(c redis.UniversalClient) Call {
	args := trimmed([]any{a.Owner, a.Lease, Rules(a.Floor, time.Duration(a.Expiry)*time.Millisecond), a.Publish}, "", "P")
	return Call{Script: acquireAllScript, Keys: Declare(c, a.Keys, ""), Args: args}
}

// Run sends a and reads its reply.
func (a *AcquireAll) Run(ctx context.Context, c redis.UniversalClient) (SetReply, error) {
	res, err := a.Call(c).Run(ctx, c).Result()
	if err != nil {
		return SetReply{}, err
	}
	return ParseSet(res, len(a.Keys))
}

// A SetReply is acquireall.lua's reply.
type SetReply struct {
	Code   int64   // Taken, Busy, Mismatch or Layout
	Behind int64   // Taken
	Left   int64   // Busy: of the first resource not taken
	Kind   string  // Mismatch: its holders' kind
	Tokens []int64 // of the resources taken, in order
}

// ParseSet reads acquireall.lua's reply for n resources.
func ParseSet(res any, n int) (SetReply, error) {
	arr, _ := res.([]any)
	if len(arr) < 2 {
		return SetReply{}, unexpected(res)
	}
	var r SetReply
	r.Code, _ = arr[0].(int64)
	var raw []any
	want := int64(n) // the tokens in the reply
	switch r.Code {
	case Taken:
		r.Behind, _ = arr[1].(int64)
		raw = arr[2:]
	case Busy, Mismatch, Layout:
		if len(arr) < 3 {
			return SetReply{}, unexpected(res)
		}
		want, _ = arr[1].(int64)
		r.Left, _ = arr[2].(int64)
		r.Kind, _ = arr[2].(string)
		raw = arr[3:]
	default:
		return SetReply{}, unexpected(res)
	}
	if int64(len(raw)) != want || r.Code != Taken && want >= int64(n) {
		return SetReply{}, errors.New("unexpected reply: wrong number of tokens")
	}
	r.Tokens = make([]int64, len(raw))
	for i, v := range raw {
		t, err := parseToken(v)
		if err != nil {
			return SetReply{}, err
		}
		r.Tokens[i] = t
	}
	return r, nil
}

// A Release frees a holder's resources for the next waiters: release.lua, or shared_release.lua.
type Release struct {
	Keys    []Keys
	Values  []string // of each: "<owner>:<token>", or "<owner>:" for whatever token the owner holds
	Kind    Kind
	Keep    bool   // exclusive: a lease with less than RecordTTL left, whose record lives RecordTTL
	Publish string // as in Acquire
	Self    string // the releasing Locker's id when it has waiters queued here; ""
	Memo    Memo   // with one resource: written with the release, while it is held
}

// Memo is what a release writes (fencing.Memo): Name's Value for TTL ms, and an expiry of
// Counter ms for the counter unless it has one.
type Memo struct {
	Name, Value  string
	TTL, Counter int64
}

// Call returns the call of r's script on c.
func (r *Release) Call(c redis.UniversalClient) Call {
	args := make([]any, 0, len(r.Values)+7)
	for _, v := range r.Values {
		args = append(args, v)
	}
	s, tail := sharedReleaseScript, []any{r.Publish, r.Self, r.Memo.Name, r.Memo.Value, r.Memo.TTL, r.Memo.Counter}
	if r.Kind.Exclusive() {
		keep := "0"
		if r.Keep {
			keep = "1"
		}
		s, args = releaseScript, append(args, keep)
	}
	args = trimmed(append(args, tail...), "0", "P", "", "", "", int64(0), int64(0))
	return Call{Script: s, Keys: Declare(c, r.Keys, r.Memo.Name), Args: args}
}

// Run sends r, of one resource, and reads its reply.
func (r *Release) Run(ctx context.Context, c redis.UniversalClient) (ReleaseReply, error) {
	call := r.Call(c)
	res, err := runOn(ctx, c, call.Script, r.Keys[0], r.Memo.Name, call.Args).Result()
	if err != nil {
		return ReleaseReply{}, err
	}
	return ParseRelease(res)
}

// A ReleaseReply is a release script's reply for one resource.
type ReleaseReply struct {
	Code   int64   // Released, NotHeld, Granted or Layout
	Grants []Grant // Granted: to the waiters of the caller's Locker
}

// A Grant is one grant to a waiter of the caller's Locker that a reply revealed.
type Grant struct {
	Element string
	Token   int64
	Now     bool // the poll script: granted by this call
}

// ParseRelease reads a release script's reply for one resource.
func ParseRelease(res any) (ReleaseReply, error) {
	switch r := res.(type) {
	case int64:
		if r == Released || r == NotHeld || r == Layout {
			return ReleaseReply{Code: r}, nil
		}
	case []any:
		if len(r) > 0 && r[0] == int64(Granted) {
			grants, err := parseGrants(r, 2)
			return ReleaseReply{Code: Granted, Grants: grants}, err
		}
	}
	return ReleaseReply{}, unexpected(res)
}

// An Extend resets or reads the lease of one holder: extend.lua, or shared_extend.lua.
type Extend struct {
	Keys  Keys
	Value string
	Kind  Kind
	Lease int64 // milliseconds; 0 reads the lease left
}

// Call returns the call of e's script on c.
func (e *Extend) Call(c redis.UniversalClient) Call {
	args := []any{e.Value, ""}
	if e.Lease > 0 {
		args[1] = e.Lease
	}
	s := extendScript
	if !e.Kind.Exclusive() {
		s = sharedExtendScript
	}
	return Call{Script: s, Keys: Declare(c, []Keys{e.Keys}, ""), Args: trimmed(args, "")}
}

// Run sends e and returns the lease left (when read), or false when e's value no longer holds it.
func (e *Extend) Run(ctx context.Context, c redis.UniversalClient) (time.Duration, bool, error) {
	call := e.Call(c)
	return ParseExtend(runOn(ctx, c, call.Script, e.Keys, "", call.Args).Result())
}

// ParseExtend reads an extend script's reply (see Extend.Run).
func ParseExtend(res any, err error) (time.Duration, bool, error) {
	if err != nil {
		return 0, false, err
	}
	switch r := res.(type) {
	case int64:
		if r == NotHeld || r == Taken {
			return 0, r == Taken, nil
		}
	case []any:
		if len(r) == 2 && r[0] == int64(Taken) {
			left, _ := r[1].(int64)
			return time.Duration(left) * time.Millisecond, true, nil
		}
	}
	return 0, false, unexpected(res)
}

// A Poll keeps a Locker's waiters queued for one resource and finds the grants to them (poll.lua).
type Poll struct {
	Keys     Keys
	ID       string   // the Locker's
	Entry    string   // its waiter value
	Publish  string   // as in Acquire
	Elements []string // its waiters' elements without a grant, longest-waiting first
}

// Run sends p and reads its reply.
func (p *Poll) Run(ctx context.Context, c redis.UniversalClient) (PollReply, error) {
	args := make([]any, 0, 3+len(p.Elements))
	args = append(args, p.ID, p.Entry, p.Publish)
	for _, e := range p.Elements {
		args = append(args, e)
	}
	res, err := runOn(ctx, c, pollScript, p.Keys, "", args).Slice()
	if err != nil {
		return PollReply{}, err
	}
	return ParsePoll(res)
}

// A PollReply is the poll script's reply.
type PollReply struct {
	Code   int64   // Granted, Busy or Layout
	Grants []Grant // Granted
	Held   string  // Busy: the exclusive holder's lock value, or ""
	Left   int64   // Busy: milliseconds until the holders let the resource change hands; -1 when free
}

// ParsePoll reads the poll script's reply.
func ParsePoll(res []any) (PollReply, error) {
	if len(res) == 0 {
		return PollReply{}, unexpected(res)
	}
	code, _ := res[0].(int64)
	r := PollReply{Code: code, Left: -1}
	switch code {
	case Granted:
		grants, err := parseGrants(res, 3)
		r.Grants = grants
		return r, err
	case Busy:
		if len(res) > 1 {
			r.Held, _ = res[1].(string)
		}
		if len(res) > 2 {
			r.Left, _ = res[2].(int64)
		}
		return r, nil
	case Layout:
		return r, nil
	}
	return PollReply{}, unexpected(res)
}

// parseGrants reads the grants of {Granted, element, token, ...} (step 2; 3 with now, a poll's).
func parseGrants(arr []any, step int) ([]Grant, error) {
	if len(arr) < 1+step || (len(arr)-1)%step != 0 {
		return nil, unexpected(arr)
	}
	out := make([]Grant, 0, (len(arr)-1)/step)
	for i := 1; i < len(arr); i += step {
		elem, _ := arr[i].(string)
		token, err := parseToken(arr[i+1])
		if err != nil {
			return nil, err
		}
		g := Grant{Element: elem, Token: token}
		if step == 3 {
			g.Now = arr[i+2] == int64(1)
		}
		out = append(out, g)
	}
	return out, nil
}

// parseToken reads a token that a script returned as a string.
func parseToken(v any) (int64, error) {
	s, _ := v.(string)
	token, err := strconv.ParseInt(s, 10, 64)
	if err != nil || token <= 0 {
		return 0, fmt.Errorf("bad token %q in reply", s)
	}
	return token, nil
}

func unexpected(res any) error { return fmt.Errorf("unexpected reply %v", res) }

// An Inspect reads what Redis holds of one resource, changing nothing (inspect.lua).
type Inspect struct{ Keys Keys }

// Run sends i and reads its reply.
func (i *Inspect) Run(ctx context.Context, c redis.UniversalClient) (State, error) {
	res, err := runOn(ctx, c, inspectScript, i.Keys, "", nil).Slice()
	if err != nil {
		return State{}, err
	}
	return ParseState(res)
}

// A State is what the inspect script read of a resource.
type State struct {
	Now        time.Time // the server's clock
	Kind       string    // "" (no lock), "x", "s", "l<n>"; "old:s", "old:l<n>" for the earlier layout
	Holders    []Holder
	Counter    int64         // the last token issued; 0 when there is no counter
	CounterTTL time.Duration // the counter's expiry; 0 when it has none
	Queue      []string      // the queue's elements, head first
	Waiting    map[string]string
}

// A Holder is one holder the inspect script read.
type Holder struct {
	Owner string
	Token int64
	End   time.Time // by the server's clock
}

// ParseState reads the inspect script's reply.
func ParseState(res []any) (State, error) {
	if len(res) != 7 {
		return State{}, unexpected(res)
	}
	str := func(v any) string { s, _ := v.(string); return s }
	now, err := strconv.ParseInt(str(res[0]), 10, 64)
	if err != nil {
		return State{}, unexpected(res)
	}
	st := State{Now: time.UnixMilli(now), Kind: str(res[1]), Waiting: map[string]string{}}
	holders, _ := res[2].([]any)
	for i := 0; i+2 < len(holders); i += 3 {
		token, err1 := strconv.ParseInt(str(holders[i+1]), 10, 64)
		end, err2 := strconv.ParseInt(str(holders[i+2]), 10, 64)
		if err1 == nil && err2 == nil {
			st.Holders = append(st.Holders, Holder{Owner: str(holders[i]), Token: token, End: time.UnixMilli(end)})
		}
	}
	if n, err := strconv.ParseInt(str(res[3]), 10, 64); err == nil && n > 0 {
		st.Counter = n
		if pttl, _ := res[4].(int64); pttl > 0 {
			st.CounterTTL = time.Duration(pttl) * time.Millisecond
		}
	}
	queue, _ := res[5].([]any)
	for _, e := range queue {
		st.Queue = append(st.Queue, str(e))
	}
	ws, _ := res[6].([]any)
	for i := 0; i+1 < len(ws); i += 2 {
		st.Waiting[str(ws[i])] = str(ws[i+1])
	}
	return st, nil
}
