// Package fencing takes locks on Redis that stay safe when a lease runs out: every acquisition
// comes with a fencing token, an integer per resource higher than every token issued before it,
// so the data store can reject the writes of a holder that lost the lock without knowing it.
//
// # Why a token
//
// A lease lock cannot by itself keep two processes out of the same critical section: a holder
// can pause (a GC pause, a slow call, a network stall) past its TTL while another process takes
// the lock, then wake and write, and checking the lease first does not help, as the pause can
// fall between the check and the write. The store must check the token instead, accepting a
// write only with a token at least as high as the highest it has seen, for example
//
//	UPDATE orders SET ..., fence_token = $token WHERE id = $id AND fence_token <= $token
//
// and a stale holder's write changes no row.
//
// # How
//
// The acquire script checks the lock, increments the resource's counter and writes the holder
// with its lease in a single round trip; release, extend and TTL checks compare the holder's
// value, random and unique per acquisition. [Locker.Do] runs a function under the lock, renews
// the lease in the background, and cancels the function's context as soon as the lock is
// lost. A busy resource has a first-come, first-served queue in Redis, next to the lock: the
// release script hands the lock to the longest-waiting waiter of any Locker in the same round
// trip and announces it with pub/sub (sharded on a Cluster), so a release wakes one waiter,
// not every process. [Locker.Lead] elects a leader per name on the same machinery, each term's
// token its epoch (package leader's Elector serves a scheduler such as gocron v2).
//
// [Shared] makes an acquisition shared, a read/write lock (docs/shared.md). [WithLimit] lets up
// to n holders hold a resource at once, a counting semaphore whose tokens cannot exclude the
// other n-1 holders (docs/limits.md). [Locker.DoAll] and [Locker.AcquireAll] lock a set of
// resources together, each with its own token, deadlock-free (docs/resources.md).
//
// # What is not guaranteed
//
// The counter lives on one Redis primary. Asynchronous replication, a restart without
// persistence, a restore from an older snapshot or an allkeys-* eviction policy can move it
// back and issue a token twice. Run Redis with appendonly yes and appendfsync always (or
// accept the risk), maxmemory-policy noeviction or volatile-*, and see [WithReplicas] and
// [WithServerTimeFloor] for failover; package servercheck reads a server's settings and says
// whether its tokens can go back. A Redis Ring spreads resources over independent servers
// and cannot keep tokens increasing when shards change. Lease expiry uses the Redis server's
// wall clock; the local validity that Do watches uses the monotonic clock.
//
// # Stability
//
// From 0.1.0 every exported name of this package and of package observe is stable: a later
// 0.x release may add names, options, struct fields and [observe.Op] or [observe.Outcome]
// values, and changes or removes one only in a new minor version whose CHANGELOG section says
// how to move. The error texts are not part of the API: match errors with [errors.Is] and
// [errors.As]. What is kept in Redis follows the upgrade rule of docs/design.md: a release
// shares a Redis with the one before it, in a rolling deploy.
package fencing
