//go:build unix

package echofencetest

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
)

// stalledEnv carries the child's Redis to the test binary run again as the stalled server:
// "<addr> <db> <prefix>".
const stalledEnv = "FENCEKIT_IDEMPOTENT_STALLED"

// stalledLease is the child's lease: its lock lapses this long after it is stopped.
const stalledLease = time.Second

// stalledCases returns the suite's cases that stop a process.
func stalledCases() []testCase {
	return []testCase{idempotentStalledFirstAttempt}
}

// idempotentStalledFirstAttempt runs the first request with a key in a child process (this
// test binary again, serving the same route with the same Locker prefix) and stops the
// child with SIGSTOP while its handler runs, past its lease. A retry here takes the key's
// lock over, runs and commits. Then the child is continued and its handler returns: its
// commit is refused by the token check, and its client gets the retry's stored response, so
// both clients of the key see one response. (The handler ran twice: at least once under a
// stall, as with any lease.)
func idempotentStalledFirstAttempt(t *testing.T, m Major) {
	if spec := os.Getenv(stalledEnv); spec != "" {
		stalledChild(t, m, spec)
		return
	}
	v := newEnv(t, m)
	v.e.Add(http.MethodPost, "/payments/:id", v.pay, v.imw(IdemConfig{}))

	// -test.run for this very subtest: "^TestBehaviour$/^IdempotentStalledFirstAttempt$".
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + p + "$"
	}
	child := exec.Command(os.Args[0], "-test.run="+strings.Join(parts, "/"), "-test.count=1")
	child.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %s", stalledEnv, v.r.Addr, v.r.DB, v.r.Prefix))
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = child.Process.Signal(syscall.SIGCONT)
		_ = child.Process.Kill()
		_ = child.Wait()
	}()
	lines := make(chan string, 10) // what the child says: "serving <url>", "entered <token>"
	go func() {
		for sc := bufio.NewScanner(stdout); sc.Scan(); {
			if line, ok := strings.CutPrefix(sc.Text(), "stalled: "); ok {
				lines <- line
			}
		}
		close(lines)
	}()
	url, ok := strings.CutPrefix(recv(t, lines, "the child serving"), "serving ")
	if !ok {
		t.Fatalf("child: %q", url)
	}

	// The first request, to the child; it stops inside the handler.
	childReply := make(chan reply, 1)
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	go func() { childReply <- sendTo(t, hc, url, http.MethodPost, "/payments/1", "k", "a") }()
	entered := recv(t, lines, "the child's handler")
	if !strings.HasPrefix(entered, "entered ") {
		t.Fatalf("child: %q", entered)
	}
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if v.r.Mini != nil {
		v.r.Mini.FastForward(stalledLease) // on miniredis, a lease runs out only so
	}
	eventually(t, 10*time.Second, "the child's lease to lapse", func() bool { return len(v.lockKeys()) == 0 })

	// The retry takes over, runs and commits.
	retry := v.send(http.MethodPost, "/payments/1", "k", "a")
	if retry.status != http.StatusCreated || retry.replayed() {
		t.Fatalf("retry while the first attempt is stopped: got %d %q, want its own 201", retry.status, retry.body)
	}
	token := retry.payment(t).Token
	if "entered "+strconv.FormatInt(token-1, 10) != entered {
		t.Errorf("retry's token %d, child %q: want the token after the child's", token, entered)
	}

	// The first attempt goes on: its handler returns, its commit is refused.
	if err := child.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	sameResponse(t, "the stalled first attempt's client", retry, recv(t, childReply, "the first attempt's reply"))
	if recs := v.records(); len(recs) != 1 || !strings.HasPrefix(v.r.Client.Get(t.Context(), recs[0]).Val(), "1:"+strconv.FormatInt(token, 10)+":") {
		t.Errorf("record: want the retry's, with its token")
	}
	t.Logf("FIGURE stalled first attempt: child %s stopped past its %v lease; the retry ran with token %d and committed; the child's commit was refused and its client got the retry's response",
		entered, stalledLease, token)
}

// stalledChild is the child of idempotentStalledFirstAttempt: it serves the route with the
// idempotency middleware on the parent's Redis and prefix, a lease of stalledLease, and a
// handler that says when it has entered and returns once told to on stdin. It never returns.
func stalledChild(t *testing.T, m Major, spec string) {
	var addr, prefix string
	var db int
	if _, err := fmt.Sscan(spec, &addr, &db, &prefix); err != nil {
		t.Fatalf("%s=%q: %v", stalledEnv, spec, err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db, DisableIdentity: true})
	v := echoEnv(t, m, nil, fencing.New(c, fencing.WithPrefix(prefix), fencing.WithTTL(stalledLease)))
	stdin := bufio.NewReader(os.Stdin)
	v.e.Add(http.MethodPost, "/payments/:id", func(r Request) error {
		tok, _ := r.Token()
		fmt.Printf("stalled: entered %d\n", tok)
		_, _ = stdin.ReadString('\n') // the handler does not look at its context
		return r.JSON(http.StatusCreated, payment{Run: -1, Token: tok, Body: "the child's"})
	}, v.imw(IdemConfig{}))
	fmt.Printf("stalled: serving %s\n", v.srv.URL)
	select {}
}
