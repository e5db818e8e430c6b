// Package wire is fencekit's protocol with Redis, in one place: the names of a resource's
// keys and channels, the encoding of every value kept in them (lock values, holders, queue
// elements, waiter keys, release records), the Lua scripts that read and change them, and
// the replies of those scripts. Package fencing runs the scripts; cmd/fencekit reads keys
// through fencing's API and finds them with this package's names. docs/design.md ("Key
// layout", which also tells the lock's hash fields and "Rolling deploys" from the earlier
// layout) is the contract that these definitions implement, and that TestKeyLayout checks.
//
// One script per verb and kind, each opening with a comment that names its KEYS, ARGV and
// replies, and starting with the constants of this package it uses, written from their Go
// definitions. The functions of the slow paths (grant.lua) stand after a script's fast paths,
// so a call that takes a fast path creates none of them.
package wire
