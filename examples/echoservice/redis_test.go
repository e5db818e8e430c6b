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

// dedicated returns a client on database db of the real Redis named by FENCING_REDIS_ADDR, and
// its URL. It empties the database first and fails the test if a key is left in it when the
// test ends. Without FENCING_REDIS_ADDR it skips the test.
func dedicated(t *testing.T, db int) (*redis.Client, string) {
	t.Helper()
	addr := os.Getenv(envAddr)
	if addr == "" {
		t.Skipf("set %s to check that nothing is left behind on a real Redis", envAddr)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	ctx := context.Background()
	if err := c.FlushDB(ctx).Err(); err != nil {
		_ = c.Close()
		t.Fatalf("FLUSHDB on database %d: %v", db, err)
	}
	t.Cleanup(func() {
		defer c.Close()
		left, err := lingering(ctx, c)
		if err != nil {
			t.Errorf("SCAN on database %d: %v", db, err)
		}
		if len(left) > 0 {
			t.Errorf("%d keys left behind in database %d, such as %q", len(left), db, left[:min(len(left), 10)])
			_ = c.FlushDB(ctx).Err()
		}
	})
	return c, fmt.Sprintf("redis://%s/%d", addr, db)
}

// testRedis returns a client on the real Redis named by FENCING_REDIS_ADDR (database 9), or on
// an embedded miniredis, and a key prefix of the test's own; the real Redis's keys under it are
// deleted when the test ends.
func testRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	prefix := "fkexample:" + strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + ":"
	addr, db := os.Getenv(envAddr), 9
	if addr == "" {
		addr, db = miniredis.RunT(t).Addr(), 0
	}
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	t.Cleanup(func() {
		defer c.Close()
		ctx := context.Background()
		keys, _ := scanKeys(ctx, c, prefix+"*")
		if len(keys) > 0 {
			_ = c.Del(ctx, keys...).Err()
		}
	})
	return c, prefix
}

// scanKeys returns the keys that match pattern, found with SCAN.
// lingering returns the keys in c's database but fencing's release records, which keep a
// release's outcome for a retried release and expire when the released lease would have
// ended, or 10 s after the release when that is later (docs/design.md, "Key layout"): one
// with a TTL longer than the examples' leases (30 s at most) or none counts.
func lingering(ctx context.Context, c *redis.Client) ([]string, error) {
	keys, err := scanKeys(ctx, c, "*")
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

func scanKeys(ctx context.Context, c *redis.Client, pattern string) ([]string, error) {
	var keys []string
	iter := c.Scan(ctx, 0, pattern, 500).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	return keys, iter.Err()
}
