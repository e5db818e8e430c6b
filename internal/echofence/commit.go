package echofence

import (
	"context"
	_ "embed"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/seam"
)

// commitSource is commit.lua: it writes a record unless a later acquisition of the key's
// lock exists or another record does, and returns the record that wins.
//
//go:embed commit.lua
var commitSource string

// CommitScript is commit.lua without its comment lines: the body sent with EVAL in the
// pipeline of the lock's release (a pipeline has no NOSCRIPT fallback for EVALSHA), which
// Redis hashes on every call, so the shorter the better.
var CommitScript = uncomment(commitSource)

// uncomment drops the blank lines and the lines that hold only a Lua comment.
func uncomment(src string) string {
	var b strings.Builder
	for line := range strings.Lines(src) {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "--") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// GuardSuffix names the record's key beside the lock's: "<prefix>{R}:idem".
const GuardSuffix = "idem"

// commitCmd adds the commit script for a record of token to pipe: with write false it only
// reads the record that won.
func commitCmd(ctx context.Context, pipe redis.Pipeliner, call *seam.Call, token int64, rec []byte, ttl time.Duration, write, floored bool) *redis.Cmd {
	mode := "0"
	if write {
		mode = "1"
	}
	ms := max(ttl.Milliseconds(), 1)
	expire := "0"
	if floored {
		expire = "1"
	}
	return pipe.Eval(ctx, CommitScript, []string{call.GuardKey, call.FenceKey}, strconv.FormatInt(token, 10), rec, ms, mode, expire)
}

// commitReply is what the commit script answered.
type commitReply struct {
	mine   bool   // the record is the call's
	free   bool   // no record and no later acquisition: the call only read (it lost its lock)
	stored string // the record that won, when another call's; "" when none
}

// parseCommit reads the commit script's reply.
func parseCommit(cmd *redis.Cmd) (commitReply, error) {
	res, err := cmd.Slice()
	if err != nil {
		return commitReply{}, err
	}
	var r commitReply
	if len(res) > 0 {
		flag, _ := res[0].(int64)
		r.mine, r.free = flag == 1, flag == 2
	}
	if len(res) > 1 {
		r.stored, _ = res[1].(string)
	}
	return r, nil
}
