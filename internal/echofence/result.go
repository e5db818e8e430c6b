package echofence

import (
	"context"
	_ "embed"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/seam"
)

// resultScript is result.lua: the result that won for a key, for a request whose release
// found its lock lost (its commit was not written).
//
//go:embed result.lua
var resultSource string

var resultScript = redis.NewScript(resultSource)

// GuardSuffix names the record's key beside the lock's: "<prefix>{R}:idem".
const GuardSuffix = "idem"

// resultCmd runs result.lua for a request of token on c: the result that won for its key.
func resultCmd(ctx context.Context, c redis.Scripter, call *seam.Call, token int64) *redis.Cmd {
	return resultScript.Run(ctx, c, []string{call.GuardKey, call.FenceKey}, strconv.FormatInt(token, 10))
}

// resultReply is what result.lua answered.
type resultReply struct {
	mine   bool   // the record is the call's
	free   bool   // no record and no later acquisition
	stored string // the record that won, when another call's; "" when none
}

// parseResult reads result.lua's reply.
func parseResult(cmd *redis.Cmd) (resultReply, error) {
	res, err := cmd.Slice()
	if err != nil {
		return resultReply{}, err
	}
	var r resultReply
	if len(res) > 0 {
		flag, _ := res[0].(int64)
		r.mine, r.free = flag == 1, flag == 2
	}
	if len(res) > 1 {
		r.stored, _ = res[1].(string)
	}
	return r, nil
}
