package main

import "strconv"

// The modes of an acquisition, as the JSON output names them. A lock key holds one of the
// first three (a string for exclusive, a hash for the others); a queue element names the mode
// of its waiter's grant.
const (
	modeExclusive = "exclusive" // one holder
	modeShared    = "shared"    // fencing.Shared: any number of shared holders, no exclusive one
	modeLimit     = "limit"     // fencing.WithLimit(n), n > 1: up to n holders at once
	// modeUnknown is a hash whose field limit is neither "shared" nor a limit above 1, or a
	// queue element the scripts cannot read (they drop it when it reaches the head).
	modeUnknown = "unknown"
)

// modeText formats a mode for a table: "exclusive", "shared", "limit 4", or "?".
func modeText(mode string, limit int) string {
	switch mode {
	case modeExclusive, modeShared:
		return mode
	case modeLimit:
		return "limit " + strconv.Itoa(limit)
	}
	return "?"
}
