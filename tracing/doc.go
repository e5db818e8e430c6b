// Package tracing records OpenTelemetry spans and metrics for the operations of a
// [fencing.Locker]. It plugs into the core's hook seam, [fencing.WithHooks]; the fencing
// package itself does not import OpenTelemetry, and a Locker without these hooks pays
// nothing for them.
//
//	locker := fencing.New(rdb, fencing.WithHooks(tracing.Hooks(
//		tracing.WithTracerProvider(tp), tracing.WithMeterProvider(mp))))
//
// # Spans
//
// Every operation gets a span of kind Internal, a child of the span in the caller's context:
// fencing.acquire (Acquire, TryAcquire and the acquisition inside Do), fencing.release,
// fencing.extend and fencing.renew (one of Do's background renewals); and for operators,
// fencing.inspect ([fencing.Locker.Inspect]) and fencing.force_release
// ([fencing.Locker.ForceRelease], with the inspect span inside it). The span is in the
// context the core uses for the operation's Redis commands, so the spans of an instrumented
// Redis client (redisotel) are its children. Do's work runs in the caller's context, so an
// Echo request span or an Asynq job span is the parent of the acquire, renew and release
// spans and of whatever the work traces; no wiring is needed beyond the Locker.
//
// [fencing.Locker.Lead] adds two spans, children of the span in Lead's context:
// fencing.campaign, one per campaign (the wait for leadership, with the fencing.acquire span
// inside it), which gets the span event fencing.leader.won (with fencing.token, the epoch)
// when leadership is won; and fencing.lead, one per term, from the win until leadership is
// lost or given up: the term's renewals and release are inside it, and so is fn's work (fn's
// context carries it). A term's span ends with the span event fencing.leader.lost and
// fencing.lost=true when leadership was lost (status Unset: losing leadership ends a term,
// it is not a failure), fencing.leader.resigned otherwise, or status Error with error.type
// work when fn failed. These two are span events, unlike a lost lock below: they mark the
// instant leadership changed hands inside spans that may last long.
//
// Span attributes:
//
//	fencing.operation      string  acquire, try_acquire, release, extend, renew, campaign, lead, inspect, force_release;
//	                               for a set of resources (one span for the set) acquire_all, try_acquire_all,
//	                               release_all, extend_all
//	fencing.resource.count int     the number of resources of a set operation (after deduplication)
//	fencing.resource       string  the resource name (WithResourceAttribute(ResourceOn), the default); for a set, the one busy or not held
//	fencing.resource.hash  string  16 hex digits of its SHA-256 (ResourceHashed) instead
//	fencing.label          string  the acquisition's label ([fencing.WithLabel]), only with ResourceOn: a label is the
//	                               caller's data, as a name is
//	fencing.outcome        string  acquired, busy, cancelled, error (acquisitions, campaigns); ok, not_held, cancelled, error (others); not_held, resigned, error (terms)
//	fencing.token          int     the fencing token, when there is one
//	fencing.attempts       int     acquire scripts sent (acquisitions)
//	fencing.wait.duration  double  seconds spent acquiring, waits included (acquisitions, campaigns)
//	fencing.hold.duration  double  seconds since the acquisition was sent (releases, terms)
//	error.type             string  why the operation failed (see below)
//
// A busy resource is not an error: the span's status stays Unset, with fencing.outcome=busy.
// An operation that fails sets the status to Error with the error's message (without the
// resource name unless ResourceOn) and sets error.type to one of these stable values:
// timeout (the context's deadline passed), cancelled (the context was cancelled), not_held
// (the lock was no longer ours: a release, extension or renewal found it gone), closed (the
// Locker was closed), invalid, not_replicated, and redis (any other failure: Redis
// unreachable or answering with an error). Errors are not recorded as span events.
//
// # Lost locks
//
// When Do loses its lock, the span in the work's context, the one Do's caller passed in
// (the request or job span), gets the attributes fencing.lost=true, fencing.token and the
// resource attribute just before the work's context is cancelled. Attributes are used rather
// than a span event because OpenTelemetry is phasing span events out. The renewal that found
// the lock gone also ends its fencing.renew span with outcome not_held; a lease that ran out
// while renewals were failing shows as renew spans with errors. When the work's context
// carries no recording span, only the metrics see the loss.
//
// # Metrics
//
// Metric attributes never name the resource, except fencing.leader's, which names the leader
// (leader names are few) as WithResourceAttribute says: fencing.resource, its hash, or
// nothing.
//
//	fencing.lock.acquire.duration  histogram       s              fencing.operation, fencing.outcome, error.type (on failure)
//	fencing.lock.acquisitions      counter         {acquisition}  fencing.operation, fencing.outcome, error.type (on failure)
//	fencing.lock.hold.duration     histogram       s              fencing.lost (false: released, true: lost while Do's work ran)
//	fencing.lock.lost              counter         {lock}         none
//	fencing.lock.waiters           up-down counter {waiter}       none: +1 when Acquire (or Do) starts, -1 when it returns
//	fencing.leader                 up-down counter {leader}       fencing.resource: 1 while this process leads the name (Lead), 0 otherwise
//
// The acquire duration is recorded for every acquisition, with its outcome; the hold duration
// when a release succeeds and when Do loses its lock (a release that finds the lock already
// gone does not know how long it was held and records nothing).
package tracing
