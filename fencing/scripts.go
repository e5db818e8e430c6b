package fencing

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts. Each .lua file opens with a comment naming its KEYS and ARGV; the scripts
// that can grant a free lock to the next waiter start with the functions of grant.lua. Scripts
// run with EVALSHA and fall back to EVAL on NOSCRIPT (redis.Script.Run), so they survive
// SCRIPT FLUSH, restarts and failovers.
var (
	//go:embed grant.lua
	grantSrc string

	//go:embed acquire.lua
	acquireBody   string
	acquireSrc    = grantSrc + acquireBody
	acquireScript = redis.NewScript(acquireSrc)

	//go:embed release.lua
	releaseBody   string
	releaseScript = redis.NewScript(grantSrc + releaseBody)

	//go:embed poll.lua
	pollBody   string
	pollScript = redis.NewScript(grantSrc + pollBody)

	//go:embed extend.lua
	extendSrc    string
	extendScript = redis.NewScript(extendSrc)

	//go:embed ttl.lua
	ttlSrc    string
	ttlScript = redis.NewScript(ttlSrc)
)
