package scan

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Errors of ReadPage about its cursor.
var (
	// ErrCursor is a cursor that ReadPage did not make.
	ErrCursor = errors.New("invalid cursor")
	// ErrServersChanged is a cursor made when other servers held the keys: a Cluster's
	// primaries changed (a failover, a node added or removed) between two pages.
	ErrServersChanged = errors.New("the servers changed since the cursor was made")
)

// The bounds of the SCAN calls of one page: the COUNT hint starts at the page's size and
// doubles while replies bring less than half of what the page still needs, up to maxCount;
// a page stops after SCAN calls whose hints add up to maxExamined, full or not, so that a
// page of a large keyspace with few locks answers in bounded time.
const (
	minCount    = 10
	maxCount    = 1000
	maxExamined = 100_000
)

// A Page is one page of a listing of lock keys.
type Page struct {
	// Names are the resources found, unique within the page, in the order SCAN returned
	// them.
	Names []string
	// Next is the cursor of the next page, "" when the scan has ended on every server.
	Next string
}

// ReadPage returns the next page of the resources whose lock keys are under prefix and whose
// names match every glob of match (Match): from the start for cursor "", else from where the
// page that returned cursor as its Next stopped. It scans the servers of Nodes one after the other,
// each with SCAN until it ends, and makes SCAN calls until the page holds at least want
// names (it can hold more: a SCAN reply is not split), the scan ends, or the calls' COUNT
// hints add up to 100,000 (a page can then hold fewer than want, even none, and have a Next).
//
// Over all its pages, a listing has SCAN's guarantees on each server: a lock key present
// from the first page to the last is listed at least once (a key can be listed twice, on
// two pages, when Redis resizes its table meanwhile); a key created or deleted meanwhile
// may or may not be. A cursor that ReadPage did not make is an error wrapping ErrCursor;
// one made when other servers held the keys, ErrServersChanged: the listing must start
// again. Other errors come from Redis and name the server.
func ReadPage(ctx context.Context, client redis.UniversalClient, prefix, cursor string, want int, match ...string) (Page, error) {
	nodes, err := Nodes(ctx, client)
	if err != nil {
		return Page{}, err
	}
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Options().Addr
	}
	pos, err := parseCursor(cursor, fingerprint(addrs))
	if err != nil {
		return Page{}, err
	}
	if pos.node >= len(nodes) {
		return Page{}, fmt.Errorf("%w: server %d of %d", ErrCursor, pos.node, len(nodes))
	}
	want = max(want, 1)
	pattern := LockPattern(prefix)
	count := int64(max(want, minCount))
	seen := map[string]bool{}
	var page Page
	for examined := int64(0); len(page.Names) < want && examined < maxExamined; examined += count {
		node := nodes[pos.node]
		keys, next, err := node.Scan(ctx, pos.scan, pattern, count).Result()
		if err != nil {
			return Page{}, fmt.Errorf("SCAN on %s: %w", node.Options().Addr, err)
		}
		found := 0
		for _, name := range Names(prefix, "*", keys) {
			if !seen[name] && matchAll(match, name) {
				seen[name] = true
				page.Names = append(page.Names, name)
				found++
			}
		}
		if pos.scan = next; next == 0 {
			if pos.node++; pos.node == len(nodes) {
				return page, nil
			}
		}
		if need := want - len(page.Names); found < need/2 {
			count = min(2*count, maxCount)
		}
	}
	page.Next = pos.format(fingerprint(addrs))
	return page, nil
}

// matchAll reports whether name matches every glob of globs.
func matchAll(globs []string, name string) bool {
	for _, g := range globs {
		if !Match(g, name) {
			return false
		}
	}
	return true
}

// position is where a listing stands: SCAN's cursor on the node-th server of Nodes, the
// servers before it done.
type position struct {
	node int
	scan uint64
}

// cursorVersion opens every cursor, so that a later format can tell its own.
const cursorVersion = "1"

// format returns the cursor of p among the servers whose fingerprint is fp: base64url of
// "1:<fp>:<node>:<scan>", opaque to its users.
func (p position) format(fp string) string {
	s := cursorVersion + ":" + fp + ":" + strconv.Itoa(p.node) + ":" + strconv.FormatUint(p.scan, 10)
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

// parseCursor returns the position of cursor, made among the servers whose fingerprint is
// fp; the start for "".
func parseCursor(cursor, fp string) (position, error) {
	if cursor == "" {
		return position{}, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return position{}, ErrCursor
	}
	parts := strings.Split(string(b), ":")
	if len(parts) != 4 || parts[0] != cursorVersion {
		return position{}, ErrCursor
	}
	node, err1 := strconv.Atoi(parts[2])
	scan, err2 := strconv.ParseUint(parts[3], 10, 64)
	if err1 != nil || err2 != nil || node < 0 {
		return position{}, ErrCursor
	}
	if parts[1] != fp {
		return position{}, ErrServersChanged
	}
	return position{node: node, scan: scan}, nil
}

// fingerprint returns a short digest of the servers' addresses, in the order of Nodes.
func fingerprint(addrs []string) string {
	h := fnv.New32a()
	for _, a := range addrs {
		h.Write([]byte(a))
		h.Write([]byte{0})
	}
	return strconv.FormatUint(uint64(h.Sum32()), 36)
}
