package main

import (
	"strconv"

	"github.com/fencekit/fencekit/fencing"
)

// The modes of an acquisition, as the JSON output names them: the kind of a resource's
// holders (fencing.Status) and of each waiter (fencing.Waiter).
const (
	modeExclusive = "exclusive" // one holder
	modeShared    = "shared"    // fencing.Shared: any number of shared holders, no exclusive one
	modeLimit     = "limit"     // fencing.WithLimit(n), n > 1: up to n holders at once
	// modeUnknown is holders whose kind Inspect cannot read: a hash of an earlier key layout
	// whose limit is neither "shared" nor a number above 1.
	modeUnknown = "unknown"
	// modeFree is a resource that locks found with waiters queued but no holder: they are
	// dead, or about to be granted it.
	modeFree = "free"
)

// holdersMode returns the mode of st's holders, and the limit for modeLimit; modeFree when
// none holds the resource.
func holdersMode(st *fencing.Status) (mode string, limit int) {
	if len(st.Holders) == 0 {
		return modeFree, 0
	}
	return kindMode(st.Shared, st.Limit)
}

// waiterMode returns the mode of the acquisition w waits for, and the limit for modeLimit.
func waiterMode(w fencing.Waiter) (mode string, limit int) {
	return kindMode(w.Shared, w.Limit)
}

// kindMode returns the mode of a kind as fencing reports it: shared, or a limit of 1
// (exclusive) or n.
func kindMode(shared bool, limit int) (string, int) {
	switch {
	case shared:
		return modeShared, 0
	case limit == 1:
		return modeExclusive, 0
	case limit > 1:
		return modeLimit, limit
	}
	return modeUnknown, 0
}

// modeText formats a mode for a table: "exclusive", "shared", "limit 4", "free", or "?".
func modeText(mode string, limit int) string {
	switch mode {
	case modeExclusive, modeShared, modeFree:
		return mode
	case modeLimit:
		return "limit " + strconv.Itoa(limit)
	}
	return "?"
}
