// Package stall carries, in the context of work that holds locks, the functions that make the
// holder behave as a process paused past its lease and run its successor: package fencing puts
// them in the work context of Do, DoAll and Lead, and fencing/fencingtest calls them.
package stall

import "context"

// A Door reaches the holds of one context.
type Door interface {
	// Stall makes every hold in the context behave as a process paused past its lease, and
	// returns once another acquirer holds one of the resources, or ctx ends.
	Stall(ctx context.Context) error
	// Takeover stalls as Stall does and runs successor as the next holder, returning its error.
	Takeover(ctx context.Context, successor func(ctx context.Context) error) error
}

type key struct{}

// With returns a copy of ctx that carries d.
func With(ctx context.Context, d Door) context.Context {
	return context.WithValue(ctx, key{}, d)
}

// From returns the Door ctx carries, or nil.
func From(ctx context.Context) Door {
	d, _ := ctx.Value(key{}).(Door)
	return d
}
