package store

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed write.lua
	writeLua    string
	writeScript = redis.NewScript(writeLua)

	//go:embed read.lua
	readLua    string
	readScript = redis.NewScript(readLua)
)

// Redis is a fencing check inside Redis: it stores each record as a hash with a
// "value" field and a "fence" field holding the record's high-water mark, and writes
// the value only when the caller's token is at least the mark, in one Lua script.
// Because value and mark live in the same key, the script touches one hash slot and
// works on Redis Cluster. Other code may read the hash directly (HGET key value) but
// must write it only through [Redis.Write].
//
// Tokens travel as decimal strings and are compared as strings inside Redis, never as
// Lua numbers, so every int64 token is compared exactly.
//
// A Redis is safe for concurrent use by multiple goroutines. Make one with
// [NewRedis]: the zero value and a nil *Redis have no client, and their methods
// return an error matching [ErrInvalid].
type Redis struct {
	rdb redis.Scripter
}

// NewRedis returns a Redis check that runs its scripts through rdb. Every go-redis
// client type satisfies [redis.Scripter]: *redis.Client, *redis.ClusterClient,
// *redis.Ring and the failover clients. A nil rdb is reported by the methods, as an
// error matching [ErrInvalid], on first use.
func NewRedis(rdb redis.Scripter) *Redis {
	return &Redis{rdb: rdb}
}

// Write stores value in the record at key if token is at least the record's
// high-water mark, and records token as the new mark, atomically (one Lua script run
// with EVALSHA, falling back to EVAL). A record never written has no mark, so any
// valid token is admitted.
//
// If token is below the mark, Write writes nothing and returns a [*StaleTokenError]
// (matching [ErrStaleToken]) carrying the mark. If key is empty, token is below 1 or
// the client is nil, it returns an error matching [ErrInvalid] and sends nothing to
// Redis. Other failures
// (the connection, a key holding another type, a malformed fence field) are returned
// wrapped, with "store: write" and the key; after a transport error the write may or
// may not have happened.
func (r *Redis) Write(ctx context.Context, key string, token int64, value string) error {
	if err := r.check("write", key); err != nil {
		return err
	}
	if err := checkToken("write", key, token); err != nil {
		return err
	}
	reply, err := writeScript.Run(ctx, r.rdb, []string{key}, strconv.FormatInt(token, 10), value).Slice()
	if err != nil {
		return fmt.Errorf("store: write %q: %w", key, err)
	}
	if len(reply) != 2 {
		return fmt.Errorf("store: write %q: unexpected reply %v", key, reply)
	}
	ok, _ := reply[0].(int64)
	s, _ := reply[1].(string)
	mark, err := parseToken(s)
	if err != nil {
		return fmt.Errorf("store: write %q: %w", key, err)
	}
	if ok != 1 {
		return &StaleTokenError{Resource: key, Token: token, Mark: mark}
	}
	return nil
}

// Read returns the value and the high-water mark of the record at key, read
// atomically. If the record was never written, it returns [ErrNotFound]. If key is
// empty or the client is nil, it returns an error matching [ErrInvalid] without
// calling Redis. Other
// failures are returned wrapped, with "store: read" and the key.
func (r *Redis) Read(ctx context.Context, key string) (value string, mark int64, err error) {
	if err := r.check("read", key); err != nil {
		return "", 0, err
	}
	reply, err := readScript.Run(ctx, r.rdb, []string{key}).Slice()
	if errors.Is(err, redis.Nil) {
		return "", 0, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	if err != nil {
		return "", 0, fmt.Errorf("store: read %q: %w", key, err)
	}
	if len(reply) != 2 {
		return "", 0, fmt.Errorf("store: read %q: unexpected reply %v", key, reply)
	}
	value, _ = reply[0].(string)
	s, _ := reply[1].(string)
	if mark, err = parseToken(s); err != nil {
		return "", 0, fmt.Errorf("store: read %q: %w", key, err)
	}
	return value, mark, nil
}

// check rejects a nil check, a nil client and an empty key.
func (r *Redis) check(op, key string) error {
	if r == nil || isNil(r.rdb) {
		return invalid("store: %s %q: nil Redis client", op, key)
	}
	if key == "" {
		return invalid("store: %s: empty key", op)
	}
	return nil
}

// parseToken decodes a token or mark as stored in Redis: the canonical decimal form
// of a non-negative int64, exactly as strconv.FormatInt writes it. Anything else (a
// sign, a leading zero, spaces, overflow) is an error, so a value written by other
// code is never silently reinterpreted.
func parseToken(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || strconv.FormatInt(v, 10) != s {
		return 0, fmt.Errorf("malformed fencing token %q", s)
	}
	return v, nil
}
