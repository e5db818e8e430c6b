package fencing

import (
	"context"

	"github.com/fencekit/fencekit/fencing/observe"
)

// WithHooks adds hooks that observe the Locker's operations (see package observe); the
// tracing package uses this seam. Several WithHooks options add up, those of New and of a
// call alike: hooks run in the order given, so give a set of hooks once. Default: none, and
// then observation costs nothing.
func WithHooks(h observe.Hooks) CallOption {
	return callOption(func(c *config) {
		if h.Start != nil || h.End != nil || h.Lost != nil {
			c.hooks = append(c.hooks, h)
		}
	})
}

// hookList is the hooks of a Locker or a call.
type hookList []observe.Hooks

// start runs every Start hook and returns the resulting context.
func (hs hookList) start(ctx context.Context, op observe.Op, resource string) context.Context {
	for i := range hs {
		if h := hs[i].Start; h != nil {
			ctx = h(ctx, op, resource)
		}
	}
	return ctx
}

// end runs every End hook, the last added first.
func (hs hookList) end(ctx context.Context, e observe.Event) {
	for i := len(hs) - 1; i >= 0; i-- {
		if h := hs[i].End; h != nil {
			h(ctx, e)
		}
	}
}

// lost runs every Lost hook.
func (hs hookList) lost(ctx context.Context, e observe.Event) {
	for i := len(hs) - 1; i >= 0; i-- {
		if h := hs[i].Lost; h != nil {
			h(ctx, e)
		}
	}
}
