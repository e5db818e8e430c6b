// Package echofencetest is the behaviour suite of fencekit's Echo middleware, written once
// and run against each Echo major's adapter: middleware (Echo v4) and middleware-v5 (Echo
// v5) call [Run] with a [Driver] of their own from their tests. The suite runs on miniredis,
// or on the real Redis named by FENCING_REDIS_ADDR (internal/redistest).
package echofencetest
