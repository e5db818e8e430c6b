package fencing

import (
	_ "embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts. Each .lua file opens with a comment naming its KEYS and ARGV; the scripts
// that can grant a free lock to the next waiter take the functions of grant.lua where their
// line "-- #include grant.lua" stands. Scripts run with EVALSHA and fall back to EVAL on
// NOSCRIPT (redis.Script.Run), so they survive SCRIPT FLUSH, restarts and failovers.
var (
	//go:embed grant.lua
	grantSrc string

	//go:embed acquire.lua
	acquireBody   string
	acquireSrc    = withGrant(acquireBody)
	acquireScript = redis.NewScript(acquireSrc)

	//go:embed release.lua
	releaseBody   string
	releaseScript = redis.NewScript(withGrant(releaseBody))

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

// grantInclude is the line of a script that grant.lua's text replaces.
const grantInclude = "-- #include grant.lua\n"

// withGrant returns body with grant.lua's functions in place of its include line.
func withGrant(body string) string {
	return strings.Replace(body, grantInclude, grantSrc, 1)
}
