package fencing

// Slot returns the Redis Cluster hash slot of key, for tests.
func Slot(key string) uint16 { return slot(key) }
