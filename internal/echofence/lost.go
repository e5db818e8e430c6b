package echofence

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/store"
)

// LostStatus is the status of the default answer to a handler that lost its lock while it
// ran: 503 Service Unavailable, which a client retries and the idempotency middleware does
// not keep (a 5xx).
const LostStatus = http.StatusServiceUnavailable

// LostRetryAfter is the Retry-After, in seconds, of the answer to a handler that lost its
// lock. The lock is then free, or held by the request that took it over, whose remaining
// lease nothing at hand tells; a retry one second later either runs, or is answered 423
// with that holder's lease (or waits for it, with MaxWait).
const LostRetryAfter = 1

// LostMessage is the message of the default answer to a handler that lost its lock: "the
// lock on <resource> was lost while the request ran", with the resource named as the
// middleware locks it, as [DenyMessage] names it.
func LostMessage(resource string) string {
	return "the lock on " + resource + " was lost while the request ran"
}

// Lost reports whether err, a handler's error, says that the handler lost its lock while it
// ran: it matches store.ErrStaleToken (a store refused a write because a newer holder's token
// had passed the request's) or fencing.ErrNotHeld (the lease lapsed or another owner took the
// lock; the request's context was cancelled with that cause), through any wrapping.
func Lost(err error) bool {
	return err != nil && (errors.Is(err, store.ErrStaleToken) || errors.Is(err, fencing.ErrNotHeld))
}

// answer returns what the middleware returns for a handler that ran under the lock of
// resource and returned result: result itself, unless it says the lock was lost ([Lost]), the
// handler wrote no response and result carries no HTTP status of its own; then Retry-After
// is set to [LostRetryAfter] and the LostHandler answers.
func (f *Fence[C]) answer(c C, resource string, result error) error {
	if !Lost(result) || f.hasStatus(result) || f.committed(c) {
		return result
	}
	f.header(c).Set(HeaderRetryAfter, strconv.Itoa(LostRetryAfter))
	return f.lostHandler(c, resource, result)
}
