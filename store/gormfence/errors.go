package gormfence

import "errors"

// ErrNoToken reports a write of a fenced model under a context that carries no
// fencing token for it: no [fencing.TokenFromContext], or, for a model with a
// FenceResource method, no [fencing.TokenFor] of its resource. The write is not run.
// A plugin built with [AllowUnfenced] writes such models unfenced instead.
var ErrNoToken = errors.New("gormfence: no fencing token in the context")
