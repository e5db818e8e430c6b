package main

import (
	"time"

	"github.com/fencekit/fencekit/fencing"
)

// What the commands print of a resource comes from fencing.Locker.Inspect, whose Status holds
// the resource's holders, their kind, its waiters and its next token: show prints one Status,
// locks one per lock key found, and release reads one before it asks.

// holderInfo is one holder of a shared resource (fencing.Shared) or a limited one
// (fencing.WithLimit), in JSON.
type holderInfo struct {
	Owner string `json:"owner"`
	// Label is the holder's label (fencing.WithLabel), "" without one.
	Label string `json:"label"`
	Token int64  `json:"token"`
	// TTLMs is the holder's lease left in milliseconds, by the server's clock.
	TTLMs int64 `json:"ttl_ms"`
}

// holdersOf returns the holders of st, by token, for JSON.
func holdersOf(st *fencing.Status) []holderInfo {
	hs := make([]holderInfo, len(st.Holders))
	for i, h := range st.Holders {
		hs[i] = holderInfo{Owner: h.Owner, Label: h.Label, Token: h.Token, TTLMs: leaseMs(h.TTL)}
	}
	return hs
}

// leaseMs returns a holder's lease left in milliseconds, -1 for a lock without expiry (which
// Inspect reads as a lease that ended a millisecond ago; the library never writes one).
func leaseMs(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}

// latestLease returns the longest lease left of st's holders in milliseconds: -1 when one
// has no expiry, -2 when none holds the resource.
func latestLease(st *fencing.Status) int64 {
	latest := int64(-2)
	for _, h := range st.Holders {
		ms := leaseMs(h.TTL)
		if ms == -1 {
			return -1
		}
		latest = max(latest, ms)
	}
	return latest
}

// oldestWait returns how long the longest-waiting live waiter of st has waited, nil when
// no waiter is alive.
func oldestWait(st *fencing.Status) *int64 {
	var oldest *int64
	for _, w := range st.Waiters {
		if ms := w.Waiting.Milliseconds(); w.Alive && (oldest == nil || ms > *oldest) {
			oldest = &ms
		}
	}
	return oldest
}

// waiterLabels returns the labels of st's waiters in queue order, "" for a waiter without
// one; nil without waiters.
func waiterLabels(st *fencing.Status) []string {
	var labels []string
	for _, w := range st.Waiters {
		labels = append(labels, w.Label)
	}
	return labels
}

// msDuration converts milliseconds to a Duration.
func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
