package fencing

// Slot returns the Redis Cluster hash slot of key, for tests.
func Slot(key string) uint16 { return slot(key) }

// AcquireAllSHA and ReleaseAllSHA return the SHA1 digests of the set scripts, for tests that
// spot their EVALSHA.
func AcquireAllSHA() string { return acquireAllScript.Hash() }
func ReleaseAllSHA() string { return releaseAllScript.Hash() }
