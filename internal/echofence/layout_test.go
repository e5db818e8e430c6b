package echofence_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	fencemw "github.com/fencekit/fencekit/middleware-v5"
)

// TestIdempotencyLayout stores results through the middleware, for a key whose resource name
// is used as it is and for one with a brace (the core's base64 form), and checks every key
// they leave in Redis: the core's, or one of the table "Key layout: the Echo idempotency
// record" in docs/design.md, with the type, TTL and value (a record that decodes) it says;
// and each row of that table is seen.
func TestIdempotencyLayout(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Key layout: the Echo idempotency record\n")
	if !ok {
		t.Fatal("docs/design.md has no section \"Key layout: the Echo idempotency record\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	type row struct {
		suffix, kind string
		seen         bool
	}
	var rows []*row
	code := regexp.MustCompile("`([^`]*)`")
	for line := range strings.Lines(section) {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 5 || !strings.HasPrefix(strings.TrimSpace(cells[0]), "`<prefix>{R}:") {
			continue
		}
		key := code.FindStringSubmatch(cells[0])[1]
		rows = append(rows, &row{suffix: strings.TrimPrefix(key, "<prefix>{R}:"), kind: strings.TrimSpace(cells[1])})
	}
	if len(rows) != 1 || rows[0].suffix != echofence.RecordName {
		t.Fatalf("rows %v, want one, for the key %q", rows, echofence.RecordName)
	}

	r := redistest.New(t)
	l := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	defer l.Close()
	const ttl = time.Hour
	e := echo.New()
	e.POST("/payments/:id", func(c *echo.Context) error {
		c.Response().Header().Set("Location", "/payments/1")
		return c.String(http.StatusCreated, "paid")
	}, fencemw.IdempotentWithConfig(fencemw.IdempotencyConfig{Locker: l, Retention: ttl}))
	for _, key := range []string{"plain-key", "brace{key}"} {
		req := httptest.NewRequest(http.MethodPost, "/payments/1", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			t.Fatalf("key %q: got %d %q", key, rec.Code, rec.Body)
		}
	}

	ctx := context.Background()
	core := regexp.MustCompile(`}:(?:b64:)?(?:lock|fence|queue|w:.+|r:.+)$`)
	for _, key := range r.Client.Keys(ctx, r.Prefix+"*").Val() {
		if core.MatchString(key) {
			continue // the core's table checks these
		}
		var match *row
		for _, rw := range rows {
			if strings.HasSuffix(key, "}:"+rw.suffix) || strings.HasSuffix(key, "}:b64:"+rw.suffix) {
				match = rw
			}
		}
		if match == nil {
			t.Errorf("key %q is in neither key layout table", key)
			continue
		}
		match.seen = true
		if typ := r.Client.Type(ctx, key).Val(); typ != match.kind {
			t.Errorf("key %q has type %s, the table says %s", key, typ, match.kind)
		}
		if d := r.Client.PTTL(ctx, key).Val(); d <= 0 || d > ttl {
			t.Errorf("key %q has TTL %v, want the middleware's %v", key, d, ttl)
		}
		if token, status, err := echofence.DecodeRecord(r.Client.Get(ctx, key).Val()); err != nil || token < 1 || status != http.StatusCreated {
			t.Errorf("key %q: record of token %d, status %d (%v), want a committed 201", key, token, status, err)
		}
	}
	for _, rw := range rows {
		if !rw.seen {
			t.Errorf("the table lists <prefix>{R}:%s, which the middleware never wrote", rw.suffix)
		}
	}
}
