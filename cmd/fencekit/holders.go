package main

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// holderInfo is one holder of a limited resource (fencing.WithLimit), whose lock key is a
// hash: the field "limit" and one field "<owner>:<token>" per holder holding the end of its
// lease in the server's unix milliseconds.
type holderInfo struct {
	Owner string `json:"owner"`
	Token int64  `json:"token"`
	// TTLMs is the holder's lease left in milliseconds, by the server's clock.
	TTLMs int64 `json:"ttl_ms"`
}

// parseHolders reads a limited resource's hash at the server time now: its limit (0 when
// the hash has none) and its live holders, by token.
func parseHolders(h map[string]string, now time.Time) (limit int, holders []holderInfo) {
	nowMs := now.UnixMilli()
	for f, v := range h {
		if f == "limit" {
			limit, _ = strconv.Atoi(v)
			continue
		}
		end, err := strconv.ParseInt(v, 10, 64)
		if err != nil || end <= nowMs {
			continue // lease ended: the next script deletes it
		}
		owner, token := parseLockValue(f)
		holders = append(holders, holderInfo{Owner: owner, Token: token, TTLMs: end - nowMs})
	}
	slices.SortFunc(holders, func(a, b holderInfo) int { return cmp.Compare(a.Token, b.Token) })
	return limit, holders
}

// serverNow returns the server's clock from a TIME reply, or the local clock without one.
func serverNow(cmd *redis.TimeCmd, local time.Time) time.Time {
	if t, err := cmd.Result(); err == nil {
		return t
	}
	return local
}
