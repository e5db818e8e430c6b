package fencing

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts. Each .lua file opens with a comment naming its KEYS and ARGV. Scripts run
// with EVALSHA and fall back to EVAL on NOSCRIPT (redis.Script.Run), so they survive SCRIPT
// FLUSH, restarts and failovers.
var (
	//go:embed acquire.lua
	acquireSrc    string
	acquireScript = redis.NewScript(acquireSrc)

	//go:embed release.lua
	releaseSrc    string
	releaseScript = redis.NewScript(releaseSrc)

	//go:embed extend.lua
	extendSrc    string
	extendScript = redis.NewScript(extendSrc)

	//go:embed handoff.lua
	handoffSrc    string
	handoffScript = redis.NewScript(handoffSrc)

	//go:embed ttl.lua
	ttlSrc    string
	ttlScript = redis.NewScript(ttlSrc)
)
