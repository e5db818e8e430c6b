package faults_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
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
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
)

// holderEnv, when set to a Redis address, makes the test binary run holderMain instead of
// the tests: it is the lock holder that TestPausedHolder stops with SIGSTOP.
const holderEnv = "FENCEKIT_FAULTS_HOLDER"

// holderMain is the holder process. For every "ROUND" line on stdin it runs Do on the
// resource "res" and, inside, prints "HOLDER ACQUIRED <token>", waits for "GO", prints
// "HOLDER WRITE <token>" (a write that was already on its way when the pause hit, so it
// does not look at the context), waits for its context to end and prints "HOLDER LOST
// <cause is ErrNotHeld> <µs from GO to cancellation>"; after Do returns it prints
// "HOLDER DONE <Do's error matches ErrNotHeld>". "EXIT" or the end of stdin ends it.
func holderMain() int {
	ttl, err := time.ParseDuration(os.Getenv(holderEnv + "_TTL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder: bad TTL:", err)
		return 2
	}
	client := redis.NewClient(&redis.Options{
		Addr:                     os.Getenv(holderEnv),
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	defer client.Close()
	l := fencing.New(client, fencing.WithPrefix(os.Getenv(holderEnv+"_PREFIX")), fencing.WithTTL(ttl))
	defer l.Close()

	lines := make(chan string)
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			lines <- in.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case line := <-lines:
			return line
		case <-time.After(time.Minute):
			return ""
		}
	}
	say := func(format string, args ...any) { fmt.Printf("HOLDER "+format+"\n", args...) }
	for next() == "ROUND" {
		err := l.Do(context.Background(), "res", func(ctx context.Context) error {
			token, _ := fencing.TokenFromContext(ctx)
			say("ACQUIRED %d", token)
			if next() != "GO" {
				return errors.New("no GO")
			}
			resumed := time.Now()
			say("WRITE %d", token)
			select {
			case <-ctx.Done():
				say("LOST %t %d", errors.Is(context.Cause(ctx), fencing.ErrNotHeld), time.Since(resumed).Microseconds())
			case <-time.After(10 * time.Second):
				say("LOST false -1")
			}
			return nil
		}, fencing.WithMaxWait(10*time.Second))
		say("DONE %t", errors.Is(err, fencing.ErrNotHeld))
	}
	return 0
}

// holderProc is the parent's handle on the holder process.
type holderProc struct {
	cmd    *exec.Cmd
	stdin  interface{ Write([]byte) (int, error) }
	lines  chan []string
	mu     sync.Mutex
	stderr bytes.Buffer
}

func (h *holderProc) Write(p []byte) (int, error) { // collects stderr
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stderr.Write(p)
}

func (h *holderProc) send(t *testing.T, line string) {
	t.Helper()
	if _, err := h.stdin.Write([]byte(line + "\n")); err != nil {
		t.Fatalf("holder stdin: %v", err)
	}
}

// expect returns the fields after the verb of the holder's next line, which must have it.
func (h *holderProc) expect(t *testing.T, verb string) []string {
	t.Helper()
	select {
	case f, ok := <-h.lines:
		if !ok {
			h.mu.Lock()
			defer h.mu.Unlock()
			t.Fatalf("holder exited while %s was expected; stderr:\n%s", verb, h.stderr.String())
		}
		if f[0] != verb {
			t.Fatalf("holder said %q, want %s", f, verb)
		}
		return f[1:]
	case <-time.After(20 * time.Second):
		t.Fatalf("holder did not say %s within 20s", verb)
	}
	return nil
}

// startHolder re-executes the test binary as the holder process.
func startHolder(t *testing.T, s *redisproc.Server, ttl time.Duration) *holderProc {
	t.Helper()
	h := &holderProc{lines: make(chan []string, 16)}
	h.cmd = exec.Command(os.Args[0], "-test.run=^$")
	h.cmd.Env = append(os.Environ(), holderEnv+"="+s.Addr(), holderEnv+"_TTL="+ttl.String(), holderEnv+"_PREFIX="+prefix(t))
	h.cmd.SysProcAttr = childAttr()
	h.cmd.Stderr = h
	stdin, err := h.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	h.stdin = stdin
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer close(h.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) > 1 && f[0] == "HOLDER" {
				h.lines <- f[1:]
			}
		}
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(h.cmd.Process.Pid, syscall.SIGCONT)
		_, _ = stdin.Write([]byte("EXIT\n"))
		_ = stdin.Close()
		drained := time.After(10 * time.Second)
	drain:
		for {
			select {
			case _, ok := <-h.lines:
				if !ok {
					break drain
				}
			case <-drained:
				_ = h.cmd.Process.Kill()
				drained = nil
			}
		}
		<-readerDone
		_ = h.cmd.Wait()
	})
	return h
}

// procState returns the state letter of a process from /proc, or 0 when unknown.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// TestPausedHolder is Kleppmann's scenario with a real process pause: the holder, a
// separate process running Do, is stopped with SIGSTOP right after it acquired the lock,
// so neither its work nor its renewals run. Its lease runs out in Redis, a second client
// takes the lock and writes, then the holder is continued and its write, already on its
// way, reaches the store with the old token. Over the rounds, the fenced store must accept
// no stale write and reject every late one, and the holder's context must be cancelled with
// ErrNotHeld once it runs again.
func TestPausedHolder(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	if procState(os.Getpid()) == 0 {
		t.Skip("needs /proc to confirm that the holder process is stopped")
	}
	const (
		rounds = 20
		ttl    = 250 * time.Millisecond
	)
	s := redisproc.Start(t)
	h := startHolder(t, s, ttl)
	pid := h.cmd.Process.Pid
	// The taker checks every 50ms for the lapsed lease (WithRetryBackoff's max; 1s by
	// default): how soon it takes over is not under test here, and each round lasts a lease
	// and one check.
	other := newLocker(t, s.Client(t), fencing.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond))
	var store fencedStore
	var cancelled, doLost int
	var maxCancel, minPause time.Duration
	minPause = time.Hour
	for round := range rounds {
		h.send(t, "ROUND")
		tokA, _ := strconv.ParseInt(h.expect(t, "ACQUIRED")[0], 10, 64)

		// The pause: the whole holder process stops, renewals included.
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		waitUntil(t, 5*time.Second, "the holder to stop", func() bool { s := procState(pid); return s == 'T' || s == 't' })

		// Another client takes over once the lease has run out in Redis, and writes.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		lockB, err := other.Acquire(ctx, "res")
		cancel()
		if err != nil {
			t.Fatalf("round %d: takeover: %v", round, err)
		}
		if lockB.Token() <= tokA {
			t.Fatalf("round %d: takeover token %d, holder's %d", round, lockB.Token(), tokA)
		}
		if !store.write("B", lockB.Token()) {
			t.Fatalf("round %d: the new holder's write with token %d was rejected", round, lockB.Token())
		}
		if err := lockB.Release(context.Background()); err != nil {
			t.Fatalf("round %d: release: %v", round, err)
		}

		// The holder runs again; its in-flight write arrives late.
		h.send(t, "GO")
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		minPause = min(minPause, time.Since(stopped))
		late, _ := strconv.ParseInt(h.expect(t, "WRITE")[0], 10, 64)
		if store.write("A", late) {
			t.Errorf("round %d: the paused holder's late write with token %d was accepted (mark %d)", round, late, lockB.Token())
		}
		lost := h.expect(t, "LOST")
		if lost[0] == "true" {
			cancelled++
			us, _ := strconv.ParseInt(lost[1], 10, 64)
			maxCancel = max(maxCancel, time.Duration(us)*time.Microsecond)
		} else {
			t.Errorf("round %d: the holder's context was not cancelled with ErrNotHeld: %q", round, lost)
		}
		if h.expect(t, "DONE")[0] == "true" {
			doLost++
		} else {
			t.Errorf("round %d: Do's error does not match ErrNotHeld", round)
		}
	}
	staleAccepted := store.accepted - rounds // every accepted write beyond the takeovers' is stale
	if staleAccepted != 0 || store.rejected != rounds {
		t.Fatalf("accepted %d stale writes and rejected %d, want 0 and %d", staleAccepted, store.rejected, rounds)
	}
	figure(t, "paused-holder", "rounds=%d ttl=%v min_pause=%v stale_accepted=0 stale_rejected=%d would_be_lost_without_fencing=%d holder_ctx_cancelled=%d/%d (max %v after resume) do_err_not_held=%d/%d",
		rounds, ttl, minPause.Round(time.Millisecond), store.rejected, store.rejected, cancelled, rounds, maxCancel.Round(100*time.Microsecond), doLost, rounds)
}
