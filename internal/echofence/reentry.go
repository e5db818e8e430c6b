package echofence

import (
	"context"

	"github.com/fencekit/fencekit/fencing"
)

// heldKey is the context key of the locks a request holds.
type heldKey struct{}

// held is one lock a request holds, linked to the ones taken by outer middlewares.
type held struct {
	locker   *fencing.Locker
	resource string
	token    int64
	record   bool // the idempotency middleware's lock, which fences its stored response
	outer    *held
}

// withHeld records in ctx that the request holds resource's lock from locker.
func withHeld(ctx context.Context, locker *fencing.Locker, resource string, token int64) context.Context {
	outer, _ := ctx.Value(heldKey{}).(*held)
	return context.WithValue(ctx, heldKey{}, &held{locker: locker, resource: resource, token: token, outer: outer})
}

// withRecordHeld records in ctx that the request holds the lock of the idempotency record
// resource, whose token is token.
func withRecordHeld(ctx context.Context, resource string, token int64) context.Context {
	outer, _ := ctx.Value(heldKey{}).(*held)
	return context.WithValue(ctx, heldKey{}, &held{resource: resource, token: token, record: true, outer: outer})
}

// heldToken returns the token of the lock on resource from locker that ctx's request already
// holds, if any.
func heldToken(ctx context.Context, locker *fencing.Locker, resource string) (int64, bool) {
	h, _ := ctx.Value(heldKey{}).(*held)
	for ; h != nil; h = h.outer {
		if !h.record && h.locker == locker && h.resource == resource {
			return h.token, true
		}
	}
	return 0, false
}

// Token returns the token of the lock that the middlewares hold for the request whose context
// is ctx: the innermost Fence's, when every Fence around the handler holds that one resource,
// and without a Fence, the idempotency middleware's (whose lock fences the stored response).
// The second result is false when no middleware holds a lock for the request, and when
// Fences hold locks of more than one resource (several keys, or nested Fences of different
// resources), whose tokens come from unrelated counters: fencing.TokenFor names the one
// wanted then. Locks that other code holds (a Do in the handler) do not count.
func Token(ctx context.Context) (int64, bool) {
	var fence, record *held
	for h, _ := ctx.Value(heldKey{}).(*held); h != nil; h = h.outer {
		switch {
		case h.record:
			if record == nil {
				record = h
			}
		case fence == nil:
			fence = h
		case h.resource != fence.resource:
			return 0, false
		}
	}
	switch {
	case fence != nil:
		return fence.token, true
	case record != nil:
		return record.token, true
	}
	return 0, false
}
