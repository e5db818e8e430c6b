package dashboard_test

import (
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/dashboard"
	"github.com/fencekit/fencekit/fencing"
)

// TestList holds an exclusive lock with a label and a labelled waiter behind it, a shared
// resource and a limited one, and reads the list as JSON and as a page: each resource with
// its mode and limit, its holders' tokens, labels and leases, its waiters' labels and time
// waited, and its next token; ?match narrows it.
func TestList(t *testing.T) {
	e := newEnv(t)
	order := e.hold(t, "order-42", fencing.WithLabel("export-42"))
	e.queue(t, "order-42", 1, fencing.WithLabel("retry-7"))
	e.hold(t, "report/2026", fencing.Shared(), fencing.WithLabel("reader one"))
	e.hold(t, "report/2026", fencing.Shared())
	e.hold(t, "pool", fencing.WithLimit(3), fencing.WithLabel("worker-2"))
	released := e.hold(t, "gone")
	if err := released.Release(t.Context()); err != nil {
		t.Fatal(err)
	}

	var list listJSON
	e.getJSON(t, "/api/locks", http.StatusOK, &list)
	if list.Next != "" || list.Match != "*" || len(list.Skipped) != 0 {
		t.Errorf("next %q, match %q, skipped %v: want one page of all", list.Next, list.Match, list.Skipped)
	}
	var names []string
	byName := map[string]lockJSON{}
	for _, l := range list.Locks {
		names = append(names, l.Resource)
		byName[l.Resource] = l
	}
	if got, want := strings.Join(names, ","), "order-42,pool,report/2026"; got != want {
		t.Fatalf("locks %s, want %s (by name; a released one left out)", got, want)
	}
	o := byName["order-42"]
	if o.Mode != "exclusive" || len(o.Holders) != 1 || o.Holders[0].Token != order.Token() || o.Holders[0].Label != "export-42" ||
		o.Holders[0].TTLMs <= 0 || o.Holders[0].TTLMs > time.Minute.Milliseconds() || o.NextToken != order.Token()+1 {
		t.Errorf("order-42: got %+v", o)
	}
	if len(o.Waiters) != 1 || o.Waiters[0].Label != "retry-7" || !o.Waiters[0].Alive || o.Waiters[0].WaitingMs == nil || *o.Waiters[0].WaitingMs < 0 || o.Waiters[0].Mode != "exclusive" {
		t.Errorf("order-42's waiters: got %+v", o.Waiters)
	}
	if r := byName["report/2026"]; r.Mode != "shared" || len(r.Holders) != 2 || r.Holders[0].Label != "reader one" || r.Holders[1].Label != "" || len(r.Waiters) != 0 {
		t.Errorf("report/2026: got %+v", r)
	}
	if p := byName["pool"]; p.Mode != "limit" || p.Limit != 3 || len(p.Holders) != 1 || p.Holders[0].Label != "worker-2" {
		t.Errorf("pool: got %+v", p)
	}

	page := e.get(t, "/", http.StatusOK).body
	for _, want := range []string{
		`href="lock?resource=order-42"`, `<span class="label">export-42</span>`, `<span class="label">retry-7</span>`,
		`<span class="label">reader one</span>`, `limit 3 <span class="muted">(1/3)</span>`, `#` + itoa(order.Token()),
		`<td class="num token">` + itoa(order.Token()+1) + `</td>`, `3 resource(s) on this page`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("list page: no %q in\n%s", want, page)
		}
	}
	if strings.Contains(page, "gone") || strings.Contains(page, "Next page") {
		t.Errorf("list page: a released lock or a next page in\n%s", page)
	}

	e.getJSON(t, "/api/locks?match=report*", http.StatusOK, &list)
	if len(list.Locks) != 1 || list.Locks[0].Resource != "report/2026" || list.Match != "report*" {
		t.Errorf("match report*: got %+v", list.Locks)
	}
	if page := e.get(t, "/?match=po%2A", http.StatusOK).body; !strings.Contains(page, "worker-2") || strings.Contains(page, "export-42") || !strings.Contains(page, `value="po*"`) {
		t.Errorf("match po*: page\n%s", page)
	}
}

// TestDetail reads one resource's page and JSON: its holders, waiters with their labels,
// kinds and rules, next token and counter expiry; a resource nobody holds is "free", with
// next token 1.
func TestDetail(t *testing.T) {
	e := newEnv(t)
	lock := e.hold(t, "invoice{7}", fencing.WithLabel("host-a"))
	e.queue(t, "invoice{7}", 1, fencing.WithLabel("reader"), fencing.Shared())
	var got lockJSON
	e.getJSON(t, "/api/lock?resource="+url.QueryEscape("invoice{7}"), http.StatusOK, &got)
	if got.Resource != "invoice{7}" || got.Mode != "exclusive" || len(got.Holders) != 1 || got.Holders[0].Label != "host-a" || got.Holders[0].Token != lock.Token() ||
		len(got.Waiters) != 1 || got.Waiters[0].Label != "reader" || got.Waiters[0].Mode != "shared" || !got.Waiters[0].Alive || len(got.Waiters[0].Locker) != 22 {
		t.Errorf("got %+v", got)
	}
	page := e.get(t, "/lock?resource="+url.QueryEscape("invoice{7}"), http.StatusOK)
	for _, want := range []string{
		"<h1>invoice{7}</h1>", `<span class="label">host-a</span>`, `<span class="label">reader</span>`, ">shared<",
		`<button class="danger" type="submit">Force release</button>`, `name="token" value="` + itoa(lock.Token()) + `"`,
		`data-refresh-ms="2000"`, `<script src="refresh.js" defer></script>`, `id="live"`, `href="api/lock?resource=invoice%7B7%7D"`,
	} {
		if !strings.Contains(page.body, want) {
			t.Errorf("page: no %q in\n%s", want, page.body)
		}
	}
	if csp := page.header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || page.header.Get("X-Frame-Options") != "DENY" {
		t.Errorf("page: CSP %q, X-Frame-Options %q: the page with the button must not be framed", csp, page.header.Get("X-Frame-Options"))
	}

	e.getJSON(t, "/api/lock?resource=never-locked", http.StatusOK, &got)
	if got.Mode != "free" || len(got.Holders) != 0 || len(got.Waiters) != 0 || got.NextToken != 1 || got.CounterTTLMs != 0 {
		t.Errorf("never-locked: got %+v", got)
	}
	if page := e.get(t, "/lock?resource=never-locked", http.StatusOK).body; !strings.Contains(page, "Not held.") || !strings.Contains(page, "No waiter.") || strings.Contains(page, "Force release</button>") {
		t.Errorf("never-locked page:\n%s", page)
	}

	counted := newEnv(t)
	counted.locker = fencing.New(counted.client, fencing.WithPrefix(counted.locker.Settings().Prefix), fencing.WithCounterExpiry(time.Hour))
	t.Cleanup(func() { _ = counted.locker.Close() })
	counted.hold(t, "expiring")
	counted.getJSON(t, "/api/lock?resource=expiring", http.StatusOK, &got)
	if got.CounterTTLMs <= 0 || got.CounterTTLMs > time.Hour.Milliseconds() {
		t.Errorf("a counter that expires: counter_ttl_ms %d, want in (0, 1h]", got.CounterTTLMs)
	}
}

// TestForceRelease frees a holder with the page's form: 303 back to the resource's page with
// the token released, the holder's own Release then fails with ErrNotHeld, the waiter gets
// the resource with a higher token; a token no holder has is 409 and releases nothing; the
// JSON form answers JSON.
func TestForceRelease(t *testing.T) {
	e := newEnv(t)
	lock := e.hold(t, "export/2026-12", fencing.WithLabel("export-42"))
	form := url.Values{"resource": {"export/2026-12"}, "token": {itoa(lock.Token())}}

	r := e.do(t, http.MethodPost, "/release", url.Values{"resource": {"export/2026-12"}, "token": {itoa(lock.Token() + 1)}})
	if r.code != http.StatusConflict || !strings.Contains(r.body, "nothing released: no holder of export/2026-12 has token "+itoa(lock.Token()+1)) {
		t.Errorf("another token: status %d, body\n%s", r.code, r.body)
	}
	if _, err := lock.TTL(t.Context()); err != nil {
		t.Fatalf("the holder lost its lock to a release of another token: %v", err)
	}

	r = e.do(t, http.MethodPost, "/release", form, "Sec-Fetch-Site", "same-origin", "Origin", e.srv.URL)
	if r.code != http.StatusSeeOther {
		t.Fatalf("release: status %d, want 303; body\n%s", r.code, r.body)
	}
	if loc, want := r.header.Get("Location"), "lock?resource=export%2F2026-12&released="+itoa(lock.Token()); loc != want {
		t.Errorf("Location %q, want %q", loc, want)
	}
	if err := lock.Release(t.Context()); !errors.Is(err, fencing.ErrNotHeld) {
		t.Errorf("the old holder's Release: got %v, want ErrNotHeld", err)
	}
	page := e.get(t, "/lock?resource=export%2F2026-12&released="+itoa(lock.Token()), http.StatusOK).body
	if !strings.Contains(page, "Released the holder with token "+itoa(lock.Token())) || !strings.Contains(page, "Not held.") || strings.Contains(page, "export-42") {
		t.Errorf("page after the release:\n%s", page)
	}
	r = e.do(t, http.MethodPost, "/release", form)
	if r.code != http.StatusConflict {
		t.Errorf("release again: status %d, want 409", r.code)
	}

	// The JSON form, with a waiter that gets the resource.
	lock = e.hold(t, "batch", fencing.WithLabel("old"))
	granted := e.queue(t, "batch", 1, fencing.WithLabel("next"))
	r = e.do(t, http.MethodPost, "/api/release", url.Values{"resource": {"batch"}, "token": {itoa(lock.Token())}})
	if want := `{"resource":"batch","token":` + itoa(lock.Token()) + `,"released":true}`; r.code != http.StatusOK || strings.Join(strings.Fields(r.body), "") != want {
		t.Fatalf("api/release: status %d, body %s; want %s", r.code, r.body, want)
	}
	next := <-granted
	var got lockJSON
	e.getJSON(t, "/api/lock?resource=batch", http.StatusOK, &got)
	if len(got.Holders) != 1 || got.Holders[0].Label != "next" || got.Holders[0].Token != next.Token() || next.Token() <= lock.Token() {
		t.Errorf("after the release: got %+v, want the waiter holding with a higher token", got)
	}
	r = e.do(t, http.MethodPost, "/api/release", url.Values{"resource": {"batch"}, "token": {itoa(lock.Token())}})
	if r.code != http.StatusConflict || !strings.Contains(r.body, `"error": "dashboard: nothing released`) {
		t.Errorf("api/release again: status %d, body %s", r.code, r.body)
	}
}

// TestForceReleaseRefused checks what force release refuses, leaving the lock held: another
// method than POST, a request from another site's page, a read-only Handler; an origin
// given to WithTrustedOrigins is let through.
func TestForceReleaseRefused(t *testing.T) {
	e := newEnv(t)
	lock := e.hold(t, "order-7")
	form := url.Values{"resource": {"order-7"}, "token": {itoa(lock.Token())}}
	for _, tc := range []struct {
		name   string
		method string
		header []string
		code   int
		text   string
	}{
		{"GET", http.MethodGet, nil, http.StatusMethodNotAllowed, "force release takes a POST"},
		{"PUT", http.MethodPut, nil, http.StatusMethodNotAllowed, "force release takes a POST"},
		{"cross-site", http.MethodPost, []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden, "cross-origin"},
		{"same-site", http.MethodPost, []string{"Sec-Fetch-Site", "same-site"}, http.StatusForbidden, "cross-origin"},
		{"other-origin", http.MethodPost, []string{"Origin", "https://evil.example"}, http.StatusForbidden, "cross-origin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, tc.method, "/release", form, tc.header...)
			if r.code != tc.code || !strings.Contains(r.body, tc.text) {
				t.Errorf("status %d, want %d with %q; body\n%s", r.code, tc.code, tc.text, r.body)
			}
			if tc.code == http.StatusMethodNotAllowed && r.header.Get("Allow") != "POST" {
				t.Errorf("Allow %q, want POST", r.header.Get("Allow"))
			}
			if _, err := lock.TTL(t.Context()); err != nil {
				t.Fatalf("the lock was released: %v", err)
			}
		})
	}

	ro := newEnvOn(t, e.client, e.locker.Settings().Prefix, dashboard.ReadOnly())
	if r := ro.do(t, http.MethodPost, "/release", form); r.code != http.StatusForbidden || !strings.Contains(r.body, "read-only") {
		t.Errorf("read-only: status %d, body\n%s", r.code, r.body)
	}
	if page := ro.get(t, "/lock?resource=order-7", http.StatusOK).body; strings.Contains(page, "<form") || strings.Contains(page, "Force release") || !strings.Contains(page, "read-only") {
		t.Errorf("read-only page offers force release:\n%s", page)
	}
	if _, err := lock.TTL(t.Context()); err != nil {
		t.Fatalf("the lock was released: %v", err)
	}

	trusted := newEnvOn(t, e.client, e.locker.Settings().Prefix, dashboard.WithTrustedOrigins("https://ops.example.com"))
	if r := trusted.do(t, http.MethodPost, "/release", form, "Origin", "https://ops.example.com", "Sec-Fetch-Site", "cross-site"); r.code != http.StatusSeeOther {
		t.Errorf("trusted origin: status %d, want 303; body\n%s", r.code, r.body)
	}
}

// TestBadRequests checks the answers to requests the Handler cannot serve, each saying why.
func TestBadRequests(t *testing.T) {
	e := newEnv(t, dashboard.WithMatch("order-*"))
	lock := e.hold(t, "order-1")
	e.hold(t, "other")
	long := strings.Repeat("x", fencing.MaxResourceLen+1)
	for _, tc := range []struct {
		name, method, path string
		form               url.Values
		code               int
		text               string
	}{
		{"no resource", "GET", "/lock", nil, 400, "no resource given"},
		{"no resource JSON", "GET", "/api/lock", nil, 400, `"error": "dashboard: no resource given`},
		{"empty resource", "GET", "/api/lock?resource=", nil, 404, "is not shown here"},
		{"long resource", "GET", "/api/lock?resource=order-" + long, nil, 400, "fencing: "},
		{"excluded resource", "GET", "/lock?resource=other", nil, 404, "resource &#34;other&#34; is not shown here"},
		{"bad cursor", "GET", "/api/locks?cursor=zzz", nil, 400, "invalid cursor"},
		{"bad cursor page", "GET", "/?cursor=%21", nil, 400, "start from the first page"},
		{"unknown page", "GET", "/admin", nil, 404, "no page /admin"},
		{"POST list", "POST", "/", url.Values{}, 405, "use GET"},
		{"DELETE detail", "DELETE", "/api/lock?resource=order-1", nil, 405, "use GET"},
		{"token not a number", "POST", "/release", url.Values{"resource": {"order-1"}, "token": {"seven"}}, 400, "not a positive integer"},
		{"token zero", "POST", "/release", url.Values{"resource": {"order-1"}, "token": {"0"}}, 400, "not a positive integer"},
		{"no token", "POST", "/api/release", url.Values{"resource": {"order-1"}}, 400, "not a positive integer"},
		{"release excluded", "POST", "/release", url.Values{"resource": {"other"}, "token": {"1"}}, 404, "not shown here"},
		{"release no resource", "POST", "/release", url.Values{"token": {"1"}}, 400, "no resource given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(t, tc.method, tc.path, tc.form)
			if r.code != tc.code || !strings.Contains(r.body, tc.text) {
				t.Errorf("status %d, want %d with %q; body\n%s", r.code, tc.code, tc.text, r.body)
			}
		})
	}
	if _, err := lock.TTL(t.Context()); err != nil {
		t.Errorf("order-1 released by a bad request: %v", err)
	}
	var list listJSON
	e.getJSON(t, "/api/locks", http.StatusOK, &list)
	if len(list.Locks) != 1 || list.Locks[0].Resource != "order-1" {
		t.Errorf("WithMatch(order-*): listed %+v", list.Locks)
	}
}

// TestEscaping shows a resource name and a label made of HTML and quotes: every page escapes
// them, and the links carry the name query-escaped.
func TestEscaping(t *testing.T) {
	e := newEnv(t)
	name := `<script>alert("name")</script>&'x`
	label := `"><img src=x onerror=alert(1)>`
	lock := e.hold(t, name, fencing.WithLabel(label))
	e.queue(t, name, 1, fencing.WithLabel("<b>waiter</b>"))
	for _, path := range []string{"/", "/lock?resource=" + url.QueryEscape(name), "/lock?resource=" + url.QueryEscape(name) + "&released=" + itoa(lock.Token())} {
		page := e.get(t, path, http.StatusOK).body
		for _, raw := range []string{"<script>alert", "<img src=x", "<b>waiter", `"name")`} {
			if strings.Contains(page, raw) {
				t.Errorf("%s: unescaped %q in\n%s", path, raw, page)
			}
		}
		for _, want := range []string{"&lt;script&gt;alert(&#34;name&#34;)&lt;/script&gt;&amp;&#39;x", "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;", "&lt;b&gt;waiter&lt;/b&gt;"} {
			if !strings.Contains(page, want) {
				t.Errorf("%s: no %q in\n%s", path, want, page)
			}
		}
	}
	if page := e.get(t, "/", http.StatusOK).body; !strings.Contains(page, `href="lock?resource=%3cscript%3ealert%28%22name%22%29%3c%2fscript%3e%26%27x"`) {
		t.Errorf("list: the link is not query-escaped in\n%s", page)
	}
	// An unprintable name is shown quoted.
	e.hold(t, "line\nbreak")
	if page := e.get(t, "/", http.StatusOK).body; !strings.Contains(page, `>&#34;line\nbreak&#34;</a>`) {
		t.Errorf("list: a name with a newline is not quoted in\n%s", page)
	}
	if r := e.do(t, http.MethodPost, "/release", url.Values{"resource": {name}, "token": {itoa(lock.Token())}}); r.code != http.StatusSeeOther {
		t.Errorf("release of the odd name: status %d, body\n%s", r.code, r.body)
	}
}

// TestOptions checks the options' validation: an invalid one, or a nil Locker, makes Err
// return it and every request answer 500 with it; WithTitle and WithRefresh show on the
// pages.
func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  dashboard.Option
		text string
	}{
		{"page size 0", dashboard.WithPageSize(0), "dashboard: page size 0 is not in [1, 1000]"},
		{"page size too big", dashboard.WithPageSize(1001), "page size 1001"},
		{"refresh too short", dashboard.WithRefresh(time.Millisecond), "dashboard: refresh interval 1ms is below 100ms"},
		{"negative refresh", dashboard.WithRefresh(-time.Second), "below 100ms"},
		{"empty title", dashboard.WithTitle(""), "dashboard: empty title"},
		{"empty match", dashboard.WithMatch(""), "dashboard: empty match"},
		{"bad origin", dashboard.WithTrustedOrigins("ops.example.com/path"), "dashboard: trusted origin: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := dashboard.New(fencing.New(nil), tc.opt)
			if err := h.Err(); err == nil || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("Err: got %v, want %q", err, tc.text)
			}
		})
	}
	h := dashboard.New(nil)
	if err := h.Err(); err == nil || err.Error() != "dashboard: nil Locker" {
		t.Errorf("nil Locker: Err %v", err)
	}
	rec := newRecorder(h, "/api/locks")
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "dashboard: nil Locker") {
		t.Errorf("nil Locker: status %d, body %s", rec.Code, rec.Body)
	}

	e := newEnv(t, dashboard.WithTitle("orders service <locks>"), dashboard.WithRefresh(0))
	page := e.get(t, "/", http.StatusOK).body
	if !strings.Contains(page, "<title>Locks · orders service &lt;locks&gt;</title>") || strings.Contains(page, "data-refresh-ms") || strings.Contains(page, "http-equiv") {
		t.Errorf("WithTitle, WithRefresh(0): page\n%s", page)
	}
	e = newEnv(t, dashboard.WithRefresh(1500*time.Millisecond))
	page = e.get(t, "/", http.StatusOK).body
	if !strings.Contains(page, `data-refresh-ms="1500"`) || !strings.Contains(page, `<meta http-equiv="refresh" content="2">`) || !strings.Contains(page, "Refreshes every 1.5s.") {
		t.Errorf("WithRefresh(1.5s): page\n%s", page)
	}
}

// TestMountPoint checks the mount point without its slash, redirected to it with the query,
// the stylesheet and the script, and that every link of the pages is relative.
func TestMountPoint(t *testing.T) {
	e := newEnv(t)
	// A ServeMux redirects /ops to /ops/ itself; a handler that strips /ops without one
	// gets "", which the Handler redirects.
	rec := newRecorder(http.StripPrefix("/ops", dashboard.New(e.locker)), "/ops?match=a*")
	if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/ops/?match=a*" {
		t.Errorf("/ops: status %d, Location %q; want 301 to /ops/?match=a*", rec.Code, rec.Header().Get("Location"))
	}
	for path, ct := range map[string]string{"/style.css": "text/css", "/refresh.js": "text/javascript"} {
		r := e.get(t, path, http.StatusOK)
		if !strings.HasPrefix(r.header.Get("Content-Type"), ct) || len(r.body) < 100 {
			t.Errorf("%s: Content-Type %q, %d bytes", path, r.header.Get("Content-Type"), len(r.body))
		}
	}
	// Every link of the pages is relative, so that they work under any mount point.
	e.hold(t, "a")
	for _, path := range []string{"/", "/lock?resource=a"} {
		page := e.get(t, path, http.StatusOK).body
		for _, m := range regexp.MustCompile(`(?:href|src|action)="([^"]*)"`).FindAllStringSubmatch(page, -1) {
			if strings.HasPrefix(m[1], "/") || strings.Contains(m[1], "//") {
				t.Errorf("%s: link %q is not relative", path, m[1])
			}
		}
	}
}
