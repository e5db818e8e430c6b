// Package wire is fencekit's protocol with Redis, in one place: the names of a resource's
// keys and channels, the encoding of every value kept in them (lock values, holders, queue
// elements, waiter keys, release records), the Lua scripts that read and change them, and
// the replies of those scripts. Package fencing runs the scripts; cmd/fencekit reads keys
// through fencing's API and finds them with this package's names. docs/design.md ("Key
// layout") is the contract that these definitions implement, and that TestKeyLayout checks.
//
// # Keys
//
// For a resource R without '{' or '}' under a prefix P (a name with braces is encoded, see
// For): P{R}:lock (the holders), P{R}:fence (the token counter), P{R}:queue (the waiting
// queue), P{R}:w:<id> (Locker id waits), P{R}:r:<value> (the outcome of a release, for a
// call sent again), P{R}:<memo> (a memo written with a release, see Memo), and the channel
// P{R}:grant:<id> (grants to Locker id's waiters).
//
// # The lock
//
// An exclusive holder is a string "<owner>:<token>", with '+' after it when waiters may be
// queued behind it, and the lease as its TTL. Shared holders and the holders of a limit are a
// hash (layout 2): 'k' their kind ('s', or 'l<n>'), 'q' the queue mark ('1' when waiters may be
// queued, '0' when none are), 'e' and 'x' a lower and an upper bound of their leases' ends, 't'
// the key's own expiry (server milliseconds), and one field per holder, named by its owner,
// "<lease end ms>:<token>". The hash outlives its last holder, until 't', so that the next
// holder finds it (the time is 't' less its TTL, one integer reply, where TIME costs an array).
// Calls read the fields they need by name (HMGET); only one that finds a lease may have ended
// (the time at or past 'e') reads them all, and deletes those that ended. The earlier layout (a
// field 'limit', holders named "<owner>:<token>") is never changed by these scripts: they answer
// Layout, and its scripts fail on this layout, so processes of the two versions never hold a
// shared or limited resource at once (see docs/design.md, "Rolling deploys").
//
// # Scripts
//
// One script per verb and kind, each opening with a comment that names its KEYS, ARGV and
// replies, and starting with the constants of this package it uses, written from their Go
// definitions. The functions of the slow paths (grant.lua) stand after a script's fast paths,
// so a call that takes a fast path creates none of them.
package wire
