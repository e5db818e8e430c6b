// Package echofencetest is the behaviour suite of fencekit's Echo middleware, written once
// and run against each Echo major's adapter: the tests of middleware (Echo v4) and of
// middleware-v5 (Echo v5) each implement [Major] over their own types (suite_test.go) and
// call [Run]. The suite runs on miniredis, or on the real Redis named by FENCING_REDIS_ADDR
// (internal/testkit/redistest).
package echofencetest
