package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
)

// serving is a fencekit serve running in the test.
type serving struct {
	url    string // the page's, from the first line
	cancel context.CancelFunc
	code   chan int    // run's exit code
	rest   chan string // stdout after the first line, once run has ended
	stderr *bytes.Buffer
	first  string

	once sync.Once
	res  result
}

// startServe runs fencekit with args, which start serve; it returns once serve has printed
// its first line, and fails t when that line has no address. serve is stopped, as by
// SIGINT, by stop or when the test ends.
func startServe(t *testing.T, args ...string) *serving {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	s := &serving{cancel: cancel, code: make(chan int, 1), rest: make(chan string, 1), stderr: &bytes.Buffer{}}
	c := &cli{stdin: strings.NewReader(""), stdout: pw, stderr: s.stderr, getenv: func(string) string { return "" }, progressEvery: time.Hour}
	go func() {
		code := c.run(ctx, args)
		_ = pw.Close()
		s.code <- code
	}()
	first := make(chan string, 1)
	go func() {
		br := bufio.NewReader(pr)
		line, _ := br.ReadString('\n')
		first <- line
		rest, _ := io.ReadAll(br)
		s.rest <- string(rest)
	}()
	s.first = <-first
	t.Cleanup(func() { s.stop() })
	i := strings.Index(s.first, "http://")
	if i < 0 {
		r := s.stop()
		t.Fatalf("serve printed no address: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	s.url = strings.TrimSpace(s.first[i:])
	return s
}

// stop stops serve, as SIGINT does, and returns what it printed and its exit code.
func (s *serving) stop() result {
	s.once.Do(func() {
		s.cancel()
		code := <-s.code
		s.res = result{stdout: s.first + <-s.rest, stderr: s.stderr.String(), code: code}
	})
	return s.res
}

// TestServe runs fencekit serve on the test's Redis and on a Cluster and holds a lock with a
// label: the page and its JSON form show it; a force release posted from another site is
// refused, one from the page itself releases it; serve stops with exit code 0 when told to.
func TestServe(t *testing.T) {
	t.Parallel()
	forTargets(t, func(t *testing.T, tg target) {
		ctx := context.Background()
		l := tg.locker(t)
		lock, err := l.TryAcquire(ctx, "export/2026-12", fencing.WithTTL(time.Hour), fencing.WithLabel("export-42"))
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Release(ctx)
		s := startServe(t, tg.args("serve", "--addr", "127.0.0.1:0", "--refresh", "1s", "--title", "ops")...)
		if !strings.HasPrefix(s.first, "Serving the locks under \""+tg.prefix+"\" at http://127.0.0.1:") {
			t.Errorf("first line %q", s.first)
		}
		client := &http.Client{Transport: &http.Transport{}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		defer client.CloseIdleConnections()
		get := func(path string) (int, string) {
			t.Helper()
			res, err := client.Get(s.url + path)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			return res.StatusCode, string(b)
		}
		post := func(form url.Values, header ...string) (int, string) {
			t.Helper()
			req, _ := http.NewRequest(http.MethodPost, s.url+"release", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			res, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			return res.StatusCode, res.Header.Get("Location")
		}

		code, body := get("api/locks")
		var list struct {
			Locks []struct {
				Resource string
				Holders  []struct {
					Token int64
					Label string
				}
			}
		}
		if err := json.Unmarshal([]byte(body), &list); err != nil || code != http.StatusOK {
			t.Fatalf("api/locks: status %d, %v in\n%s", code, err, body)
		}
		if len(list.Locks) != 1 || list.Locks[0].Resource != "export/2026-12" || len(list.Locks[0].Holders) != 1 || list.Locks[0].Holders[0].Label != "export-42" {
			t.Errorf("api/locks: got %+v", list.Locks)
		}
		if code, body := get(""); code != http.StatusOK || !strings.Contains(body, `<span class="label">export-42</span>`) || !strings.Contains(body, "<title>Locks · ops</title>") || !strings.Contains(body, `data-refresh-ms="1000"`) {
			t.Errorf("list page: status %d\n%s", code, body)
		}
		form := url.Values{"resource": {"export/2026-12"}, "token": {itoa(lock.Token())}}
		if code, _ := post(form, "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
			t.Errorf("release from another site: status %d, want 403", code)
		}
		if _, err := lock.TTL(ctx); err != nil {
			t.Fatalf("released from another site: %v", err)
		}
		if code, loc := post(form, "Sec-Fetch-Site", "same-origin"); code != http.StatusSeeOther || loc != "lock?resource=export%2F2026-12&released="+itoa(lock.Token()) {
			t.Errorf("release: status %d, Location %q", code, loc)
		}
		if err := lock.Extend(ctx, time.Minute); err == nil {
			t.Error("the lock is still held after the release")
		}
		client.CloseIdleConnections()
		if r := s.stop(); r.code != exitOK || r.stderr != "" {
			t.Errorf("stop: exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

// TestServeOptions checks --read-only, the warning for an address other hosts reach, and
// the exit codes of serve's failures.
func TestServeOptions(t *testing.T) {
	t.Parallel()
	tg := sharedTarget(t)
	s := startServe(t, tg.args("serve", "--addr", "127.0.0.1:0", "--read-only")...)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	res, err := client.PostForm(s.url+"release", url.Values{"resource": {"x"}, "token": {"1"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("--read-only: release answered %d, want 403", res.StatusCode)
	}
	client.CloseIdleConnections()
	if r := s.stop(); r.code != exitOK {
		t.Errorf("stop: exit %d, stderr %q", r.code, r.stderr)
	}

	s = startServe(t, tg.args("serve", "--addr", "0.0.0.0:0")...)
	if !strings.Contains(s.url, "://127.0.0.1:") {
		t.Errorf("0.0.0.0: printed %q, want an address of this host", s.url)
	}
	if r := s.stop(); r.code != exitOK || !strings.Contains(r.stderr, "fencekit serve: warning: ") || !strings.Contains(r.stderr, "is reachable from other hosts and has no access control") {
		t.Errorf("0.0.0.0: exit %d, stderr %q; want a warning", r.code, r.stderr)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		text string
	}{
		{"argument", tg.args("serve", "extra"), exitUsage, `unexpected argument "extra"`},
		{"json", tg.args("serve", "--json"), exitUsage, "flag provided but not defined: -json"},
		{"page size", tg.args("serve", "--page-size", "0"), exitUsage, "dashboard: page size 0 is not in [1, 1000]"},
		{"refresh", tg.args("serve", "--refresh", "1ms"), exitUsage, "dashboard: refresh interval 1ms is below 100ms"},
		{"address", tg.args("serve", "--addr", "127.0.0.1:http-alt-nope"), exitError, "fencekit serve: listen tcp"},
		{"redis down", []string{"serve", "-u", "redis://127.0.0.1:1", "--addr", "127.0.0.1:0"}, exitError, "fencekit serve: cannot reach Redis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, nil, 0, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.text) || r.stdout != "" {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s\nwant stderr with %q", r.code, tc.code, r.stdout, r.stderr, tc.text)
			}
		})
	}
}

// itoa formats a token.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }
