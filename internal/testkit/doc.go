// Package testkit holds fencekit's shared test harnesses, and nothing a program imports: its
// subpackages are imported only by _test.go files (and by the bench module's benchmarks).
//
//   - redistest: the tests' Redis, a miniredis of their own or the server named by
//     FENCING_REDIS_ADDR, with a key prefix per test and the keys deleted afterwards.
//   - redisproc: real redis-server (or valkey-server) processes on free loopback ports:
//     crashes, restarts, replicas, a small Cluster.
//   - echofencetest: the behaviour suite of the Echo middleware, run once per Echo major.
//
// The test hooks that package fencing exposes to its public test kit (fencingtest.Stall and
// fencingtest.Takeover) live in fencing/stall.go: they are that public API's implementation,
// reached only through a work context, and not a hook into the library's code paths.
package testkit
