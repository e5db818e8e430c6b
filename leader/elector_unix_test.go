//go:build unix

package leader_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/leader"
)

const envChildElector = "FENCEKIT_CHILD_ELECTOR"

// electorEvent is a line a child of TestElectorReplicas printed: "on <epoch> <ns>" (IsLeader
// returned nil for a new term; ns is when that call returned), "nil <epoch> <ns>" (it still
// does; ns is when the call began), "off <epoch> <ns> <error>" (it returned an error again,
// at ns) or "run <error>" (Run returned).
type electorEvent struct {
	child int // the child's number, 0 to 2
	kind  string
	token int64
	at    time.Time
	text  string
}

// electorLog collects the children's lines as they come.
type electorLog struct {
	mu     sync.Mutex
	events []electorEvent
}

// writer returns the stdout of child n: it parses each line into an event.
func (lg *electorLog) writer(n int) *lineWriter {
	return &lineWriter{line: func(s string) {
		f := strings.SplitN(s, " ", 4)
		ev := electorEvent{child: n, kind: f[0], text: s}
		if len(f) >= 3 {
			ev.token, _ = strconv.ParseInt(f[1], 10, 64)
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			ev.at = time.Unix(0, ns)
		}
		if len(f) == 4 {
			ev.text = f[3]
		}
		lg.mu.Lock()
		lg.events = append(lg.events, ev)
		lg.mu.Unlock()
	}}
}

// find returns the first event that matches.
func (lg *electorLog) find(match func(electorEvent) bool) (electorEvent, bool) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	for _, ev := range lg.events {
		if match(ev) {
			return ev, true
		}
	}
	return electorEvent{}, false
}

// spans returns the terms the children saw: from each "on" to the last "nil" or "on" of the
// same process and epoch.
func (lg *electorLog) spans() []leaderSpan {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	type key struct {
		child int
		token int64
	}
	byTerm := map[key]*leaderSpan{}
	var order []key
	for _, ev := range lg.events {
		k := key{ev.child, ev.token}
		switch ev.kind {
		case "on":
			byTerm[k] = &leaderSpan{who: fmt.Sprintf("child %d", ev.child), token: ev.token, first: ev.at, last: ev.at}
			order = append(order, k)
		case "nil":
			if sp := byTerm[k]; sp != nil && ev.at.After(sp.last) {
				sp.last = ev.at
			}
		}
	}
	spans := make([]leaderSpan, 0, len(order))
	for _, k := range order {
		spans = append(spans, *byTerm[k])
	}
	return spans
}

// lineWriter calls line for every line written to it.
type lineWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	line func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		i := bytes.IndexByte(w.buf.Bytes(), '\n')
		if i < 0 {
			return len(p), nil
		}
		w.line(string(w.buf.Next(i + 1)[:i]))
	}
}

// TestElectorReplicas runs three candidates of one Elector in child processes (this test
// binary run again), each calling IsLeader and Token in a loop as a scheduler would and
// printing what it sees. The leader is killed with SIGKILL; the next leader is stopped with
// SIGSTOP until its lease has run out by its own clock (and the third candidate leads), then
// continued with SIGCONT. Then:
//   - the stopped leader's first IsLeader after SIGCONT is an error: it saw no nil after the
//     stop, before its renewal could notice the loss;
//   - no two processes saw IsLeader nil at once, and the epochs of the terms, in the order they
//     began, strictly increase.
func TestElectorReplicas(t *testing.T) {
	if os.Getenv(envChildElector) != "" {
		childElector()
		return
	}
	const ttl = 2 * time.Second
	r := redistest.New(t)
	var lg electorLog
	var children []*exec.Cmd
	defer func() {
		for _, c := range children {
			_ = c.Process.Signal(syscall.SIGCONT)
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		if t.Failed() {
			lg.mu.Lock()
			for _, ev := range lg.events {
				t.Logf("child %d: %s %d %s %s", ev.child, ev.kind, ev.token, ev.at.Format(time.StampMicro), ev.text)
			}
			lg.mu.Unlock()
		}
	}()
	for n := range 3 {
		c := exec.Command(os.Args[0], "-test.run=^TestElectorReplicas$")
		c.Env = append(os.Environ(), envChildElector+"="+strings.Join([]string{r.Addr, strconv.Itoa(r.DB), r.Prefix, strconv.FormatInt(ttl.Milliseconds(), 10)}, ","))
		w := lg.writer(n)
		c.Stdout, c.Stderr = w, w
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		children = append(children, c)
	}
	// leader waits for a term with an epoch above after.
	leader := func(after int64) electorEvent {
		t.Helper()
		var ev electorEvent
		waitFor(t, ttl+10*time.Second, fmt.Sprintf("a leader with an epoch above %d", after), func() bool {
			var ok bool
			ev, ok = lg.find(func(ev electorEvent) bool { return ev.kind == "on" && ev.token > after })
			return ok
		})
		return ev
	}

	first := leader(0)
	if err := children[first.child].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = children[first.child].Wait()
	if r.Mini != nil {
		r.Mini.FastForward(ttl) // on miniredis, the lease runs out only so
	}
	second := leader(first.token)

	stopped := children[second.child].Process
	if err := stopped.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	if r.Mini != nil {
		r.Mini.FastForward(ttl)
	}
	third := leader(second.token)
	if third.child == second.child {
		t.Fatalf("the stopped child %d led again (epoch %d)", third.child, third.token)
	}
	// Its last renewal was sent before the stop, so by its own clock its lease ends within
	// the TTL of the stop. (On a real Redis, the third leader could only win after that; on
	// miniredis, FastForward ended the lease in Redis sooner.)
	time.Sleep(time.Until(stoppedAt.Add(ttl)))
	if err := stopped.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	continued := time.Now()
	var off electorEvent
	waitFor(t, 10*time.Second, "the continued process's first IsLeader", func() bool {
		var ok bool
		off, ok = lg.find(func(ev electorEvent) bool {
			return ev.child == second.child && ev.token == second.token && ev.kind == "off"
		})
		return ok
	})
	if !strings.Contains(off.text, "not leader") {
		t.Errorf("the continued process's IsLeader: got %q, want ErrNotLeader", off.text)
	}
	// The third leader still leads: it has seen no error since it won.
	if ev, ok := lg.find(func(ev electorEvent) bool { return ev.child == third.child && ev.kind == "off" }); ok {
		t.Errorf("the third leader stopped leading: %s", ev.text)
	}
	lg.mu.Lock()
	for _, ev := range lg.events {
		if ev.kind != "on" && ev.kind != "nil" && ev.kind != "off" {
			t.Errorf("child %d: unexpected line %q", ev.child, ev.text)
		}
	}
	lg.mu.Unlock()
	spans := checkSpans(t, lg.spans())
	for _, sp := range spans {
		if sp.who == fmt.Sprintf("child %d", second.child) && sp.token == second.token && !sp.last.Before(stoppedAt) {
			t.Errorf("the stopped process saw IsLeader nil at %v, after the SIGSTOP at %v", sp.last.Format(time.StampMicro), stoppedAt.Format(time.StampMicro))
		}
	}
	if len(spans) < 3 {
		t.Errorf("got %d terms, want at least 3", len(spans))
	}
	t.Logf("FIGURE elector replicas: epochs %d (SIGKILL), %d (SIGSTOP for %v, lease %v), %d; after SIGCONT the stopped leader's IsLeader said %q %v after the SIGCONT",
		first.token, second.token, continued.Sub(stoppedAt).Round(time.Millisecond), ttl, third.token, off.text, off.at.Sub(continued).Round(time.Microsecond))
}

// childElector is a candidate of TestElectorReplicas: it runs an Elector and calls IsLeader
// and Token in a loop, printing what it sees, until it is killed.
func childElector() {
	parts := strings.Split(os.Getenv(envChildElector), ",")
	if len(parts) != 4 {
		os.Exit(2)
	}
	db, _ := strconv.Atoi(parts[1])
	lease, _ := strconv.Atoi(parts[3])
	c := redis.NewClient(&redis.Options{Addr: parts[0], DB: db, DisableIdentity: true})
	l := fencing.New(c, fencing.WithPrefix(parts[2]), fencing.WithTTL(time.Duration(lease)*time.Millisecond))
	e := leader.New(l, "leader")
	go func() { fmt.Println("run", e.Run(context.Background())) }()
	var (
		leading  int64 // the epoch while IsLeader returns nil
		reported time.Time
	)
	for {
		began := time.Now()
		err := e.IsLeader(context.Background())
		token, ok := e.Token()
		ended := time.Now()
		switch {
		case err != nil || !ok:
			if leading != 0 {
				fmt.Println("off", leading, ended.UnixNano(), err)
				leading = 0
			}
		case token != leading:
			fmt.Println("on", token, ended.UnixNano())
			leading, reported = token, ended
		case began.Sub(reported) >= 20*time.Millisecond:
			fmt.Println("nil", token, began.UnixNano())
			reported = began
		}
		time.Sleep(time.Millisecond)
	}
}
