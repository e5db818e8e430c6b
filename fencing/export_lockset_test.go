package fencing

import "github.com/fencekit/fencekit/internal/topology"

// Slot returns the Redis Cluster hash slot of key, for tests.
func Slot(key string) uint16 { return topology.Slot(key) }

// AcquireAllSHA and ReleaseSHA return the SHA1 digests of the set acquire script and of the
// release script, for tests that spot their EVALSHA.
func AcquireAllSHA() string { return acquireAllScript.hash() }
func ReleaseSHA() string    { return releaseScript.hash() }
