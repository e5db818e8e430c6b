// Package echofencetest is the behaviour suite of fencekit's Echo middleware, written once
// and run against each Echo major's adapter: the tests of middleware (Echo v4) call
// Run(t, V4()) and those of middleware-v5 (Echo v5) Run(t, V5()). One generic driver
// (adapter.go) serves both majors; V4 and V5 give it their types, the adapter's API and the
// few things that differ in Echo itself. The suite runs on miniredis, or on the real Redis
// named by FENCING_REDIS_ADDR (internal/redistest).
package echofencetest
