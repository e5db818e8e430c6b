package scan

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/internal/testkit/redisproc"
	"github.com/fencekit/fencekit/internal/wire"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

const prefix = "fencing:"

// fill writes n lock keys under prefix (every tenth name with braces, so under its base64
// key), twice as many fence counters, n lock keys under another prefix and a few other keys,
// and returns the resources of the lock keys under prefix.
func fill(t *testing.T, client redis.UniversalClient, n int) map[string]bool {
	t.Helper()
	ctx := context.Background()
	want := map[string]bool{}
	for i := range n {
		name := fmt.Sprintf("order-%d", i)
		if i%10 == 0 {
			name = fmt.Sprintf("tenant{%d}/order", i)
		}
		want[name] = true
		k := wire.For(prefix, name)
		for _, kv := range [][2]string{{k.Lock, wire.Value("ownerOOOOOOOOOOOOOOOOO", 1)}, {k.Fence, "1"}, {wire.For(prefix, name+"-idle").Fence, "1"}, {wire.For("other:", name).Lock, "x"}} {
			if err := client.Set(ctx, kv[0], kv[1], time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := client.Set(ctx, prefix+"unrelated", "x", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	return want
}

// listAll reads every page from the start, checks that each page but the last holds at
// least want names and not many more, and returns how often each name was listed and the
// number of pages.
func listAll(t *testing.T, client redis.UniversalClient, match string, want int) (map[string]int, int) {
	t.Helper()
	got := map[string]int{}
	cursor, pages := "", 0
	for {
		page, err := ReadPage(t.Context(), client, prefix, cursor, want, match)
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		pages++
		for _, name := range page.Names {
			got[name]++
		}
		if page.Next == "" {
			return got, pages
		}
		if len(page.Names) < want || len(page.Names) > 4*want {
			t.Errorf("page %d holds %d names, want %d or a few more", pages, len(page.Names), want)
		}
		if pages > 1000 {
			t.Fatal("more than 1000 pages")
		}
		cursor = page.Next
	}
}

// TestReadPage lists 300 lock keys, among other keys, in pages of 25 on a private
// redis-server and on a three-primary Cluster: every lock key under the prefix is listed,
// once, no other key is, and every page but the last holds 25 names or a few more; a match
// narrows the listing to the names it matches.
func TestReadPage(t *testing.T) {
	redisproc.Require(t)
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"server", func(t *testing.T) redis.UniversalClient { return redisproc.Start(t).Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redisproc.StartCluster(t, 3).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := tc.client(t)
			all := fill(t, client, 300)
			got, pages := listAll(t, client, "*", 25)
			if pages < 2 {
				t.Errorf("got %d pages, want several", pages)
			}
			for name := range all {
				if got[name] != 1 {
					t.Errorf("%q listed %d times, want once", name, got[name])
				}
			}
			for name := range got {
				if !all[name] {
					t.Errorf("%q listed, but it is no lock key under %q", name, prefix)
				}
			}
			got, _ = listAll(t, client, "tenant{*", 5)
			if len(got) != 30 {
				t.Errorf("match tenant{*: got %d names, want 30", len(got))
			}
			for name := range got {
				if !strings.HasPrefix(name, "tenant{") {
					t.Errorf("match tenant{*: got %q", name)
				}
			}
		})
	}
}

// TestReadPageCursor checks the cursors that ReadPage refuses: one it did not make, one
// past the servers, and one made on other servers.
func TestReadPageCursor(t *testing.T) {
	redisproc.Require(t)
	client := redisproc.Start(t).Client(t)
	fill(t, client, 50)
	ctx := t.Context()
	page, err := ReadPage(ctx, client, prefix, "", 10)
	if err != nil || page.Next == "" {
		t.Fatalf("first page: %+v, %v; want a next page", page, err)
	}
	other := redisproc.Start(t).Client(t)
	if _, err := ReadPage(ctx, other, prefix, page.Next, 10); !errors.Is(err, ErrServersChanged) {
		t.Errorf("a cursor of another server: got %v, want ErrServersChanged", err)
	}
	fp := fingerprint([]string{client.Options().Addr})
	for _, cursor := range []string{"x", "!!", position{node: 1}.format(fp), "MTpiYWQ", page.Next + "A"} {
		if _, err := ReadPage(ctx, client, prefix, cursor, 10); !errors.Is(err, ErrCursor) {
			t.Errorf("cursor %q: got %v, want ErrCursor", cursor, err)
		}
	}
	if _, err := ReadPage(ctx, wrapped{client}, prefix, "", 10); err == nil || !strings.Contains(err.Error(), "scan.wrapped") {
		t.Errorf("a client of another type: got %v, want an error naming its type", err)
	}
}

// wrapped is a client whose servers Nodes cannot tell.
type wrapped struct{ redis.UniversalClient }
