// Package stall carries, in the context of work that holds locks, the function that makes
// the holder behave as a process paused past its lease: package fencing puts it in the work
// context of Do, DoAll and Lead, and the test kit (fencing/fencingtest) calls it. Only
// packages under fencing can import it; it is no part of fencing's API.
package stall

import "context"

// A Staller makes every hold in a context behave as a process paused past its lease: renewals
// stop, leases end, and it returns once another acquirer holds one of the resources, or ctx
// ends.
type Staller func(ctx context.Context) error

type key struct{}

// With returns a copy of ctx that carries s.
func With(ctx context.Context, s Staller) context.Context {
	return context.WithValue(ctx, key{}, s)
}

// From returns the Staller ctx carries, or nil.
func From(ctx context.Context) Staller {
	s, _ := ctx.Value(key{}).(Staller)
	return s
}
