package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// The tests' Redis, reached with public packages only, so that this directory can be copied
// into a module of its own as it is.

// envAddr names the variable that points the tests at a real Redis.
const envAddr = "FENCING_REDIS_ADDR"

// testDB is the database of the real Redis the tests use: the service's keys have a fixed
// prefix, so the tests empty the database first and check that it is empty at the end.
const testDB = 15

// testRedis returns a client on database testDB of the real Redis named by
// FENCING_REDIS_ADDR, or on an embedded miniredis (then also returned), and the URL to give
// the service as REDIS_ADDR. On a real Redis it empties the database first and fails the
// test if a key is left in it when the test ends.
func testRedis(t *testing.T) (*redis.Client, *miniredis.Miniredis, string) {
	t.Helper()
	addr, db := os.Getenv(envAddr), testDB
	var mr *miniredis.Miniredis
	if addr == "" {
		mr = miniredis.RunT(t)
		addr, db = mr.Addr(), 0
	}
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db, DisableIdentity: true})
	ctx := context.Background()
	if err := c.FlushDB(ctx).Err(); err != nil {
		_ = c.Close()
		t.Fatalf("FLUSHDB on database %d: %v", db, err)
	}
	t.Cleanup(func() {
		defer c.Close()
		left, err := lingering(ctx, c)
		if err != nil {
			t.Errorf("KEYS on database %d: %v", db, err)
		}
		if len(left) > 0 {
			t.Errorf("%d keys left behind in database %d, such as %q", len(left), db, left[:min(len(left), 10)])
			_ = c.FlushDB(ctx).Err()
		}
	})
	return c, mr, fmt.Sprintf("redis://%s/%d", addr, db)
}

// lingering returns the keys in c's database but fencing's release records, which keep a
// release's outcome for a retried release and expire when the released lease would have
// ended, or 10 s after the release when that is later (docs/design.md, "Key layout"): one
// with a TTL longer than the examples' leases (30 s at most) or none counts.
func lingering(ctx context.Context, c *redis.Client) ([]string, error) {
	keys, err := c.Keys(ctx, "*").Result()
	left := keys[:0]
	for _, k := range keys {
		if strings.Contains(k, "}:r:") {
			if ttl := c.PTTL(ctx, k).Val(); ttl > 0 && ttl <= 30*time.Second {
				continue
			}
		}
		left = append(left, k)
	}
	return left, err
}
