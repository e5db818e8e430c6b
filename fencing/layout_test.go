package fencing_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// A layoutRow is one row of the key layout table in docs/design.md.
type layoutRow struct {
	key   *regexp.Regexp // the Key column, with its placeholders as patterns
	kind  string         // "string", "list", "hash" or "channel"
	value *regexp.Regexp // the Value column: every backquoted form, as alternatives
	raw   string         // the Key column as written
	seen  bool
}

// layoutPlaceholders are the patterns the table's placeholders stand for.
var layoutPlaceholders = strings.NewReplacer(
	`<owner>`, `(?:[A-Za-z0-9_-]{22}(?:~[^:.~]*)?|[A-Za-z0-9_-]*\.[0-9]+\.[1-9][0-9]*`+layoutRules+`)`,
	`<element>`, `[A-Za-z0-9_-]*\.[0-9]+\.[1-9][0-9]*`+layoutRules,
	`<rules>`, layoutRules,
	`<more>`, `(?::[A-Za-z0-9_-]*\.[0-9]+\.[1-9][0-9]*`+layoutRules+`:[1-9][0-9]*)*`,
	`<token>`, `[1-9][0-9]*`,
	`<id>`, `[A-Za-z0-9_-]*`,
	`<n>`, `[0-9]+`,
	`<lease ms>`, `[1-9][0-9]*`,
	`<floor>`, `[01]`,
	`<since ms>`, `[0-9]+`,
	`<memo>`, `[A-Za-z0-9_-]{1,64}`,
	`<memo value>`, `(?s:.*)`,
	`<deadline ms>`, `[1-9][0-9]*`,
	`\[\+\]`, `\+?`, // [+], quoted
)

// layoutRules is the pattern of a queue element's rules (see the table's queue row).
const layoutRules = `(?:f|e[1-9][0-9]*)?(?:s|l[1-9][0-9]*)?(?:~[A-Z2-7]*)?`

// readLayout parses the key layout table of docs/design.md for a resource whose keys
// start with base ("<prefix>{R}").
func readLayout(t *testing.T, prefix, resource string) []*layoutRow {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Key layout\n")
	if !ok {
		t.Fatal("docs/design.md has no Key layout section")
	}
	code := regexp.MustCompile("`([^`]*)`")
	var rows []*layoutRow
	for line := range strings.Lines(section) {
		if strings.HasPrefix(line, "## ") {
			break
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 5 || !strings.HasPrefix(strings.TrimSpace(cells[0]), "`<prefix>") {
			continue
		}
		key := code.FindStringSubmatch(cells[0])[1]
		var values []string
		for _, m := range code.FindAllStringSubmatch(cells[3], -1) {
			values = append(values, layoutPlaceholders.Replace(regexp.QuoteMeta(m[1])))
		}
		kind := strings.Fields(strings.TrimSpace(cells[1]))[0]
		if kind == "pub/sub" {
			kind = "channel"
		}
		pattern := strings.Replace(regexp.QuoteMeta(key), regexp.QuoteMeta("<prefix>{R}"), regexp.QuoteMeta(prefix+"{"+resource+"}"), 1)
		rows = append(rows, &layoutRow{
			key:   regexp.MustCompile("^" + layoutPlaceholders.Replace(pattern) + "$"),
			kind:  kind,
			value: regexp.MustCompile("^(?:" + strings.Join(values, "|") + ")$"),
			raw:   key,
		})
	}
	if len(rows) < 6 {
		t.Fatalf("read %d rows of the key layout table, want at least 6", len(rows))
	}
	return rows
}

// TestKeyLayout runs a holder, a waiter of another Locker and a hand-over, and checks every
// key, type, value and channel message that appears against the key layout table of
// docs/design.md: each must match a row, and each row must be seen. It also checks that the
// Lua scripts name no key suffix the table does not list.
func TestKeyLayout(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := t.Context()
	const resource = "layout"
	rows := readLayout(t, r.Prefix, resource)
	match := func(name, kind, value string) {
		t.Helper()
		for _, row := range rows {
			if row.kind == kind && row.key.MatchString(name) {
				row.seen = true
				if !row.value.MatchString(value) {
					t.Errorf("%s %q holds %q, which the table's row %s does not allow (%v)", kind, name, value, row.raw, row.value)
				}
				return
			}
		}
		t.Errorf("%s %q (holding %q) is not in the key layout table", kind, name, value)
	}
	snapshot := func() {
		t.Helper()
		for _, key := range r.Client.Keys(ctx, r.Prefix+"*").Val() {
			switch typ := r.Client.Type(ctx, key).Val(); typ {
			case "string":
				match(key, typ, r.Client.Get(ctx, key).Val())
			case "list":
				for _, v := range r.Client.LRange(ctx, key, 0, -1).Val() {
					match(key, typ, v)
				}
			case "hash":
				for f, v := range r.Client.HGetAll(ctx, key).Val() {
					match(key, typ, f+"="+v)
				}
			case "none": // expired meanwhile
			default:
				t.Errorf("key %q has type %s, which the table does not list", key, typ)
			}
		}
	}

	// Every message on the resource's channels, heard by a client of the test's own.
	sub := r.NewClient(t).PSubscribe(ctx, r.Prefix+"*")
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var messages []*redis.Message
	go func() {
		for m := range sub.Channel() {
			mu.Lock()
			messages = append(messages, m)
			mu.Unlock()
		}
	}()

	holder, waiter := process(t, r), process(t, r, fencing.WithServerTimeFloor())
	held := mustAcquire(t, holder, resource, fencing.WithLabel("task 7: a.b~c"))
	got := acquireAsync(ctx, waiter, resource, fencing.WithLabel("request 9"))
	waitFor(t, 5*time.Second, "the waiter in the queue", func() bool { return queueLen(r, resource) == 1 })
	snapshot() // held, marked; the queue and the waiter's key
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	snapshot() // granted from the queue; the release record
	if err := a.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	snapshot()

	// The same with a limited resource: two holders of limit 2, a waiter, a hand-over.
	limit := fencing.WithLimit(2)
	one, two := mustAcquire(t, holder, resource, limit), mustAcquire(t, holder, resource, limit)
	got = acquireAsync(ctx, waiter, resource, limit)
	waitFor(t, 5*time.Second, "the limited waiter in the queue", func() bool { return queueLen(r, resource) == 1 })
	snapshot()
	if err := one.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if a = <-got; a.err != nil {
		t.Fatal(a.err)
	}
	snapshot()
	for _, lock := range []*fencing.Lock{two, a.lock} {
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	snapshot()

	// The same with shared holders: two hold, a writer queues behind them (the hash's mark),
	// readers queue behind the writer, and the writer's release grants them as a run.
	readers := []*fencing.Lock{mustAcquire(t, holder, resource, fencing.Shared()), mustAcquire(t, holder, resource, fencing.Shared())}
	writer := acquireAsync(ctx, waiter, resource)
	waitFor(t, 5*time.Second, "the writer in the queue", func() bool { return queueLen(r, resource) == 1 })
	queuedReaders := []<-chan acquired{acquireAsync(ctx, waiter, resource, fencing.Shared()), acquireAsync(ctx, waiter, resource, fencing.Shared())}
	waitFor(t, 5*time.Second, "the readers in the queue", func() bool { return queueLen(r, resource) == 3 })
	snapshot()
	for _, lock := range readers {
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if a = <-writer; a.err != nil {
		t.Fatal(a.err)
	}
	snapshot()
	if err := a.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ch := range queuedReaders {
		if a = <-ch; a.err != nil {
			t.Fatal(a.err)
		}
		readers = append(readers, a.lock)
	}
	snapshot()
	for _, lock := range readers[2:] {
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	snapshot()
	// A memo, written with a release.
	memo := fencing.Memo{Name: "shipped", Value: "order 42: box 7", TTL: time.Minute}
	if err := mustAcquire(t, holder, resource).ReleaseWith(ctx, memo); err != nil {
		t.Fatal(err)
	}
	snapshot()
	waitFor(t, 5*time.Second, "the grant's message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(messages) > 0
	})
	mu.Lock()
	for _, m := range messages {
		match(m.Channel, "channel", m.Payload)
	}
	mu.Unlock()
	for _, row := range rows {
		if !row.seen {
			t.Errorf("the table lists %s, which the run never wrote", row.raw)
		}
	}

	// The suffixes the scripts append to a resource's key base ('w:', 'r:', 'grant:').
	var listed []string
	for _, row := range rows {
		rest := strings.TrimPrefix(row.raw, "<prefix>{R}:")
		suffix, _, _ := strings.Cut(rest, "<")
		listed = append(listed, suffix)
	}
	lua, err := filepath.Glob(filepath.Join("..", "internal", "wire", "*.lua"))
	if err != nil || len(lua) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	appended := regexp.MustCompile(`\.\. '([a-z]+:)'`)
	for _, file := range lua {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range appended.FindAllStringSubmatch(string(src), -1) {
			if !slices.Contains(listed, m[1]) {
				t.Errorf("%s builds keys ending %q, which the key layout table does not list", file, m[1])
			}
		}
	}
}
