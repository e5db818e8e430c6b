// Package errorstest holds tests only: no code of it is built into a program.
//
// Its tests provoke, for real, every error that fencekit's public API and its adapters
// return, each sentinel through each surface that can return it: package fencing's calls,
// Lock and LockSet (TestCore), leader and cronfence (TestLeader), asynqfence (TestAsynq),
// the Echo v4 and v5 middleware (TestEcho), store (TestStore), dashboard (TestDashboard),
// servercheck (TestServercheck) and the span statuses of tracing (TestTracing), on miniredis,
// or on the real Redis named by FENCING_REDIS_ADDR. One checker holds every text to the rule
// of STYLE.md ("Structured errors"): each line of it (an errors.Join puts one error on each)
// starts with one fencekit package's prefix and carries no other, no line repeats a
// ": "-separated segment, and the error still matches the sentinels it stands for with
// errors.Is. Each case is named "<surface>/<sentinel>", and "/<how>" when a surface returns
// the sentinel in several ways; go test -v prints every text.
package errorstest
