package main

import (
	"regexp"
	"strconv"
	"strings"
)

// element is what a queue element says of its waiter. An element is "<Locker id>.<n>.<lease
// ms>" followed by the rules of its grant: 'f' when its tokens are floored at the server clock
// (fencing.WithServerTimeFloor), or 'e<ms>' when the counter expires after <ms>
// (fencing.WithCounterExpiry, which implies the floor); then 's' for a shared waiter or 'l<n>'
// for one of n slots, neither for an exclusive one.
type element struct {
	locker   string
	leaseMs  int64  // the lease its grant gets
	mode     string // modeExclusive, modeShared or modeLimit
	limit    int    // n, for modeLimit
	floor    bool   // tokens at or above the server clock
	expiryMs int64  // the counter's expiry after a grant; 0: it does not expire
}

var (
	elementForm = regexp.MustCompile(`(?s)^([^.]*)\.[0-9]+\.([0-9]+)(.*)$`)
	expiryRule  = regexp.MustCompile(`e([0-9]+)`)
	limitRule   = regexp.MustCompile(`l([0-9]+)`)
)

// parseElement reads a queue element as the scripts do (fencing/lib.lua's parse), so it says
// what a grant of it would be. ok is false for an element they cannot read: they drop it,
// without a grant, when it reaches the head of the queue.
func parseElement(s string) (e element, ok bool) {
	m := elementForm.FindStringSubmatch(s)
	if m == nil {
		return element{}, false
	}
	lease, err := strconv.ParseInt(m[2], 10, 64)
	if err != nil {
		return element{}, false
	}
	e = element{locker: m[1], leaseMs: lease, mode: modeExclusive}
	rules := m[3]
	e.floor = strings.Contains(rules, "f")
	if r := expiryRule.FindStringSubmatch(rules); r != nil {
		e.floor = true
		e.expiryMs, _ = strconv.ParseInt(r[1], 10, 64)
	}
	if strings.Contains(rules, "s") {
		e.mode = modeShared
	} else if r := limitRule.FindStringSubmatch(rules); r != nil {
		e.mode = modeLimit
		e.limit, _ = strconv.Atoi(r[1])
	}
	return e, true
}
