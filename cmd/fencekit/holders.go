package main

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// holderInfo is one holder of a shared resource (fencing.Shared) or a limited one
// (fencing.WithLimit), whose lock key is a hash: the field "limit" ("shared", or the limit
// n), the key's bookkeeping ("until", its expiry, and "q", its queue mark) and one field
// "<owner>:<token>" per holder holding the end of its lease in the server's unix
// milliseconds.
type holderInfo struct {
	Owner string `json:"owner"`
	Token int64  `json:"token"`
	// TTLMs is the holder's lease left in milliseconds, by the server's clock.
	TTLMs int64 `json:"ttl_ms"`
}

// parseHolders reads the hash of a shared or limited resource at the server time now: its
// mode (modeShared, modeLimit with its limit, or modeUnknown when the field limit is missing
// or neither "shared" nor a number above 1) and its live holders, by token.
func parseHolders(h map[string]string, now time.Time) (mode string, limit int, holders []holderInfo) {
	mode = modeUnknown
	if v, ok := h["limit"]; ok {
		if v == "shared" {
			mode = modeShared
		} else if n, err := strconv.Atoi(v); err == nil && n > 1 {
			mode, limit = modeLimit, n
		}
	}
	nowMs := now.UnixMilli()
	for f, v := range h {
		if f == "limit" || f == "until" || f == "q" {
			continue
		}
		end, err := strconv.ParseInt(v, 10, 64)
		if err != nil || end <= nowMs {
			continue // lease ended: the next script deletes it
		}
		owner, token := parseLockValue(f)
		holders = append(holders, holderInfo{Owner: owner, Token: token, TTLMs: end - nowMs})
	}
	slices.SortFunc(holders, func(a, b holderInfo) int {
		return cmp.Or(cmp.Compare(a.Token, b.Token), cmp.Compare(a.Owner, b.Owner))
	})
	return mode, limit, holders
}

// serverNow returns the server's clock from a TIME reply, or the local clock without one.
func serverNow(cmd *redis.TimeCmd, local time.Time) time.Time {
	if t, err := cmd.Result(); err == nil {
		return t
	}
	return local
}
