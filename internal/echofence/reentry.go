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
	outer    *held
}

// withHeld records in ctx that the request holds resource's lock from locker.
func withHeld(ctx context.Context, locker *fencing.Locker, resource string, token int64) context.Context {
	outer, _ := ctx.Value(heldKey{}).(*held)
	return context.WithValue(ctx, heldKey{}, &held{locker: locker, resource: resource, token: token, outer: outer})
}

// heldToken returns the token of the lock on resource from locker that ctx's request already
// holds, if any.
func heldToken(ctx context.Context, locker *fencing.Locker, resource string) (int64, bool) {
	h, _ := ctx.Value(heldKey{}).(*held)
	for ; h != nil; h = h.outer {
		if h.locker == locker && h.resource == resource {
			return h.token, true
		}
	}
	return 0, false
}
