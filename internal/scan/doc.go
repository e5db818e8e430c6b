// Package scan finds the locks that package fencing keeps in Redis, for the fencekit command
// and the operators' page (package dashboard): the servers that hold keys (the client, or
// every primary of a Cluster), SCAN over each, the lock keys' names decoded with
// wire.ResourceOf and filtered with Redis's glob rules, each resource read with
// Locker.Inspect, and pages of a listing that resume from an opaque cursor.
//
// It carries no key layout of its own: names and patterns come from package wire. Scans
// have SCAN's guarantees, per server: a key present from the start of a full scan to its
// end is returned at least once; a key created or deleted meanwhile may or may not be.
package scan
