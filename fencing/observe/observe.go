// Package observe holds the types with which hooks watch a fencing.Locker's operations: give a
// [Hooks] to fencing.WithHooks, and its functions see every operation start and end, and every
// lock that work loses (package tracing turns them into spans and metrics), free without hooks.
package observe

import (
	"context"
	"time"
)

// An Op is an operation that [Hooks] observe.
type Op uint8

// The operations hooks observe.
const (
	OpAcquire    Op = iota + 1 // Acquire, and the acquisition inside Do: may wait
	OpTryAcquire               // TryAcquire: one attempt
	OpRelease                  // Lock.Release, and the release at the end of Do
	OpExtend                   // Lock.Extend
	OpRenew                    // one background renewal inside Do, or of the whole set inside DoAll (with Event.Resources)

	// The operations on a set of resources (fencing.LockSet): one event, with Event.Resources.
	OpAcquireAll    // AcquireAll, and the acquisition inside DoAll: may wait
	OpTryAcquireAll // TryAcquireAll: no wait
	OpReleaseAll    // LockSet.Release, and the release at the end of DoAll
	OpExtendAll     // LockSet.Extend

	// The operations of fencing.Locker.Lead.
	OpCampaign // one campaign of Lead: the wait for leadership; ends when won or given up
	OpLead     // one term of Lead: from the campaign won until leadership is lost or given up

	// The operations of operators.
	OpInspect      // Locker.Inspect: one read of a resource's holders and waiters
	OpForceRelease // Locker.ForceRelease: a holder's lock freed by someone else
)

// String returns the operation's name in lower case, such as "acquire".
func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "unknown"
}

var opNames = [...]string{
	OpAcquire: "acquire", OpTryAcquire: "try_acquire", OpRelease: "release", OpExtend: "extend",
	OpRenew: "renew", OpAcquireAll: "acquire_all", OpTryAcquireAll: "try_acquire_all",
	OpReleaseAll: "release_all", OpExtendAll: "extend_all", OpCampaign: "campaign", OpLead: "lead",
	OpInspect: "inspect", OpForceRelease: "force_release",
}

// An Outcome is how an operation ended.
type Outcome string

// The outcomes reported in [Event.Outcome].
const (
	OutcomeAcquired  Outcome = "acquired"  // the lock was taken
	OutcomeBusy      Outcome = "busy"      // another owner holds the lock (not an error)
	OutcomeCancelled Outcome = "cancelled" // the context ended first
	OutcomeError     Outcome = "error"     // Redis or the input failed
	OutcomeOK        Outcome = "ok"        // a release, extension, renewal or inspection took effect
	OutcomeNotHeld   Outcome = "not_held"  // the lock was no longer ours (or, for ForceRelease, the holder's)
	OutcomeResigned  Outcome = "resigned"  // a term of Lead ended by its own choice: fn returned, or the context ended
)

// An Event describes one finished operation, or a lost lock.
type Event struct {
	Op Op
	// Resource is the resource operated on. For an operation on a set, it is the resource
	// that made the operation fail (the busy one, or the first that was not held), or "".
	Resource string
	// Resources is the set of an operation on several resources, deduplicated and in the
	// canonical order (see fencing.Locker.AcquireAll); nil for one resource.
	Resources []string
	// Token is the acquisition's fencing token, 0 when none; for ForceRelease, the holder's.
	Token   int64
	Outcome Outcome
	// Label is the acquisition's label (fencing.WithLabel), or "".
	Label string
	// Err is the operation's error; nil for OutcomeAcquired, OutcomeOK and TryAcquire's busy.
	Err error
	// Attempts is the number of acquire scripts an acquisition sent (for a set, all of them).
	Attempts int
	// Elapsed is the time from Start to End: for an acquisition, the time spent waiting.
	Elapsed time.Duration
	// Held is the time since the acquisition was sent, for releases, lost locks and OpLead.
	Held time.Duration
	// ClockBehind is set on an acquisition with a server-time floor (WithServerTimeFloor,
	// WithCounterExpiry) when the Redis server's clock was more than a second behind the last
	// token issued for the resource: the clock stepped back. The token is still the highest while
	// the counter exists; one created again before the clock catches up issues lower tokens,
	// which a store that checks tokens refuses. Zero otherwise, and for grants from the queue.
	ClockBehind time.Duration
}

// Hooks observe a Locker's operations; any field may be nil. Give them to fencing.WithHooks.
// They run on the calling goroutine (renewals on a timer's): be quick and safe for concurrent use.
//
// Each campaign of fencing.Locker.Lead is an OpCampaign whose End's outcome is OutcomeAcquired
// when leadership is won (Token is the term's epoch), OutcomeCancelled when the context ended,
// or OutcomeError (OutcomeBusy under WithMaxWait); its acquisition is an OpAcquire inside it.
// Each term is an OpLead, whose Start's context is the parent of fn's (the term's renewals and
// release are inside it), and whose End has OutcomeNotHeld when leadership was lost,
// OutcomeError when fn failed, or OutcomeResigned otherwise; Held is the term's length.
type Hooks struct {
	// Start is called when an operation begins; resource is "" for an operation on a set,
	// whose resources End's Event lists. The context it returns is used for the operation's
	// Redis calls and passed to End, so a span started here is the parent of the client's.
	Start func(ctx context.Context, op Op, resource string) context.Context
	// End is called when the operation started by Start ends, with Start's context.
	End func(ctx context.Context, e Event)
	// Lost is called with the work's context when Do loses its lock, just before cancelling it.
	Lost func(ctx context.Context, e Event)
}
