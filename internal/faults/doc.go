// Package faults holds fencekit's fault-injection tests; it has no API of its own.
//
// The tests run real redis-server processes (internal/testkit/redisproc) and break them the ways
// the literature on distributed locks names: a lock holder paused past its lease, kill -9
// with and without persistence, a restart from an older snapshot, a failover to a replica
// that missed the latest acquisitions, Redis going down while work runs under Do, SCRIPT
// FLUSH, CLIENT PAUSE, a busy script, running out of memory, eviction policies, a Redis
// Cluster with awkward resource names, and waiters on many resources of a Cluster through
// killed pub/sub connections, a slot migration, a primary restart and a failover, and shared
// (reader) locks through the same: processes queued, killed and stopped, replies lost, a
// Cluster and a replica. Each test checks the promise that no stale write is
// accepted by a store that checks the token, or shows where a configuration breaks it,
// and logs its measurements as lines of the form
//
//	FIGURE <name>: <measurements>
//
// so that `go test -v ./internal/faults/ | grep FIGURE` collects them. Tests skip when
// redis-server is not on PATH.
package faults
