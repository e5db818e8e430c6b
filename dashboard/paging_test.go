package dashboard_test

import (
	"fmt"
	"html"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/dashboard"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
	"github.com/fencekit/fencekit/internal/wire"
)

// TestPaging holds 130 labelled locks on a private redis-server and on a three-primary
// Redis Cluster (miniredis answers SCAN with every key at once) and reads the list in pages
// of 20, as JSON and through the pages' "Next page" links: every lock is listed once, with
// its label, every page but the last holds 20 locks or a few more, and on the Cluster the
// locks of every primary are listed.
func TestPaging(t *testing.T) {
	redisproc.Require(t)
	t.Run("server", func(t *testing.T) {
		srv := redisproc.Start(t)
		checkPaging(t, srv.Client(t), nil)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redisproc.StartCluster(t, 3)
		checkPaging(t, cl.Client(t), func(name string) string { return cl.NodeFor(wire.For(fencing.DefaultPrefix, name).Lock).Addr() })
	})
}

// checkPaging runs TestPaging on client; nodeOf, if not nil, names the primary of a
// resource's keys.
func checkPaging(t *testing.T, client redis.UniversalClient, nodeOf func(string) string) {
	const n, size = 130, 20
	e := newEnvOn(t, client, fencing.DefaultPrefix, dashboard.WithPageSize(size))
	want := map[string]string{}
	nodes := map[string]int{}
	for i := range n {
		name := fmt.Sprintf("job/%03d", i)
		if i%10 == 0 {
			name = fmt.Sprintf("tenant{%d}", i) // under its base64 key
		}
		want[name] = fmt.Sprintf("worker-%d", i)
		e.hold(t, name, fencing.WithLabel(want[name]), fencing.WithTTL(time.Hour))
		if nodeOf != nil {
			nodes[nodeOf(name)]++
		}
	}
	if nodeOf != nil && len(nodes) != 3 {
		t.Fatalf("the locks are on %d primaries, want 3: %v", len(nodes), nodes)
	}

	seen := map[string]int{}
	pages := 0
	for cursor := ""; ; pages++ {
		var list listJSON
		e.getJSON(t, "/api/locks?cursor="+cursor, http.StatusOK, &list)
		for _, l := range list.Locks {
			seen[l.Resource]++
			if len(l.Holders) != 1 || l.Holders[0].Label != want[l.Resource] {
				t.Errorf("%q: holders %+v, want one labelled %q", l.Resource, l.Holders, want[l.Resource])
			}
		}
		if list.Next == "" {
			break
		}
		if len(list.Locks) < size || len(list.Locks) > 4*size {
			t.Errorf("page %d: %d locks, want %d or a few more", pages+1, len(list.Locks), size)
		}
		cursor = list.Next
	}
	if pages < 2 {
		t.Errorf("%d pages of %d locks, want several", pages+1, n)
	}
	for name := range want {
		if seen[name] != 1 {
			t.Errorf("%q listed %d times, want once", name, seen[name])
		}
	}
	if len(seen) != n {
		t.Errorf("listed %d resources, want %d", len(seen), n)
	}

	// The same through the pages: each "Next page" link leads to the next page.
	next := regexp.MustCompile(`<a href="([^"]*)" rel="next">Next page</a>`)
	label := regexp.MustCompile(`<span class="label">worker-\d+</span>`)
	shown, path := 0, "/"
	for range 1000 {
		page := e.get(t, path, http.StatusOK).body
		shown += len(label.FindAllString(page, -1))
		m := next.FindStringSubmatch(page)
		if m == nil {
			break
		}
		path = "/" + html.UnescapeString(m[1])[len("./"):]
	}
	if shown != n {
		t.Errorf("the pages showed %d labels, want %d", shown, n)
	}
}
