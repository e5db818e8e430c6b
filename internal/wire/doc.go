// Package wire is fencekit's protocol with Redis, in one place: the names of a resource's keys
// and channels and the encoding of every value kept in them (encoding.go), the Lua scripts that
// read and change them, one per verb and kind, each opening with a comment that names its KEYS,
// ARGV and replies, and a typed call and reply per script (scripts.go, which loads them,
// pasting the blocks they share at "-- #include x.lua": grant.lua the one hand-off, state.lua
// the general path). Package fencing runs the calls; cmd/fencekit finds keys with these names.
// docs/design.md ("Key layout", with the lock's hash fields and the earlier layout) is the
// contract these definitions implement, and that TestKeyLayout checks.
package wire
