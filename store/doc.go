// Package store checks fencing tokens where the data lives.
//
// A fencing lock (package fencing) gives each acquisition of a resource a token, an
// int64 that is strictly greater than every token issued for that resource before.
// The lock alone protects nothing: a holder can pause (GC, a slow network, a
// suspended VM) until its lease lapses, another client acquires the lock, and the
// first one wakes up and writes anyway. The store must therefore refuse writes that
// carry a token below the highest one it has already accepted for the record, its
// high-water mark. This package offers that check in four places:
//
//   - [Memory], for state held in this process: [Memory.Write] runs the caller's
//     write under a per-resource lock only when the token is admissible.
//   - [Redis], for a value kept in Redis: one Lua script compares the token with a
//     mark stored beside the value, in the same hash, and writes both atomically.
//   - [Table], for a SQL row with a fence_token column: a conditional UPDATE (or a
//     PostgreSQL upsert) that changes the row only when the token is admissible.
//   - [Fences], for a whole SQL transaction: [Fences.Check], its first statement,
//     raises the resource's fence row to the token, and the row lock orders every
//     later transaction of the resource after this one (PostgreSQL, MySQL/MariaDB,
//     SQLite). [Fences.Tx] and [Fences.PgxTx] run the whole transaction: begin,
//     Check, the caller's function, commit or roll back.
//
// Table and Fences run on database/sql, or on pgx v5 through [Pgx]. GORM writes are
// fenced by the plugin in module github.com/fencekit/fencekit/store/gormfence.
//
// All four refuse a stale token with a [*StaleTokenError], which matches
// [ErrStaleToken] with [errors.Is], and write nothing in that case.
//
// # Equal tokens are admitted
//
// A write is admitted when token >= mark (in SQL, fence_token <= token). One
// acquisition may legitimately write more than once under its own token, for example
// a job that renews its lease and saves progress several times, and every new
// acquisition receives a strictly higher token, so a holder whose lease lapsed always
// carries a strictly lower token than its successor and is refused.
//
// The strict comparison (token > mark) would also catch a second writer holding an
// equal token, but forbids those repeat writes; this package does not offer it. Equal
// tokens for two holders can only come from a counter that moved back: a Redis
// restart without persistence, or a failover to a replica that had not yet received
// the latest increment. Configure the lock's Redis persistence and failover against
// that; no store-side check can repair a counter that issues the same token twice.
//
// # Tokens and records
//
// Tokens must be at least 1: 0 is Go's zero value and the SQL column's default, so a
// forgotten token is rejected as invalid rather than admitted on a fresh record.
// Compare a record only with tokens from one lock key: tokens of two different
// resources come from unrelated counters and say nothing about each other.
//
// Empty names, nil clients, invalid tokens and the zero values of the types that
// need a constructor are reported as errors matching [ErrInvalid], never panics,
// and nothing is written.
package store
