// Package wire is fencekit's protocol with Redis, in one place: the names of a resource's keys
// and channels, the encoding of every value kept in them, the Lua scripts that read and change
// them (one per verb and kind, each opening with a comment that names its KEYS, ARGV and
// replies), and their replies. Package fencing runs the scripts; cmd/fencekit finds keys with
// this package's names. docs/design.md ("Key layout", with the lock's hash fields and the
// earlier layout) is the contract that these definitions implement, and that TestKeyLayout checks.
package wire
