package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The tests' Redis, reached with public packages only, so that this directory can be copied
// into a module of its own as it is.

// envAddr names the variable that points the tests at a real Redis.
const envAddr = "FENCING_REDIS_ADDR"

// testDB is the database the tests use on a real Redis, as the other tests do; every key
// they create is under a prefix of their own.
const testDB = 9

// testRedis returns the address the program is given (empty: its embedded miniredis; a
// redis:// URL of database 9 of the real Redis named by FENCING_REDIS_ADDR) and a key prefix
// of the test's own; the real Redis's keys under it are deleted when the test ends.
func testRedis(t *testing.T) (addr, prefix string) {
	t.Helper()
	prefix = "robfigcron-example:" + strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + ":"
	if os.Getenv(envAddr) == "" {
		return "", prefix
	}
	c, url := realRedis(t)
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := scanKeys(ctx, c, prefix+"*")
		if len(keys) > 0 {
			_ = c.Del(ctx, keys...).Err()
		}
	})
	return url, prefix
}

// realRedis returns a client on database 9 of the real Redis named by FENCING_REDIS_ADDR, and
// its URL; the client is closed when the test ends. Without FENCING_REDIS_ADDR it skips the
// test.
func realRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	addr := os.Getenv(envAddr)
	if addr == "" {
		t.Skipf("set %s to run on a real Redis", envAddr)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, DB: testDB})
	t.Cleanup(func() { _ = c.Close() })
	return c, fmt.Sprintf("redis://%s/%d", addr, testDB)
}

// lingering returns the keys under prefix but fencing's release records, which keep a
// release's outcome for a retried release and expire when the released lease would have
// ended, or 10 s after the release when that is later (docs/design.md, "Key layout"): one
// with a TTL longer than the examples' leases (30 s at most) or none counts.
func lingering(ctx context.Context, c *redis.Client, prefix string) ([]string, error) {
	keys, err := scanKeys(ctx, c, prefix+"*")
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

// scanKeys returns the keys that match pattern, found with SCAN.
func scanKeys(ctx context.Context, c *redis.Client, pattern string) ([]string, error) {
	var keys []string
	iter := c.Scan(ctx, 0, pattern, 500).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	return keys, iter.Err()
}
