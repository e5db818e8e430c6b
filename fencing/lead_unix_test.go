//go:build unix

package fencing_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/store"
)

// TestLeadStoppedProcessFenced stops a leader in a child process (this test binary run again)
// with SIGSTOP, past its lease, while it writes to a fenced store (store.Redis) in a loop
// that never looks at its context. A candidate in this process takes over with a higher
// epoch and writes; then the child is continued with SIGCONT: its next write, with the old
// epoch, is refused, and the store keeps the new leader's value.
func TestLeadStoppedProcessFenced(t *testing.T) {
	t.Parallel()
	if os.Getenv("FENCEKIT_CHILD_STOPPED") != "" {
		childStoppedLeader()
		return
	}
	const ttl = time.Second
	r := redistest.New(t)
	l := newLocker(t, r, fencing.WithTTL(ttl))
	st := store.NewRedis(r.Client)
	key := r.Prefix + "ledger"
	child := exec.Command(os.Args[0], "-test.run=^TestLeadStoppedProcessFenced$")
	child.Env = append(os.Environ(), "FENCEKIT_CHILD_STOPPED="+strings.Join([]string{r.Addr, strconv.Itoa(r.DB), r.Prefix, key, strconv.FormatInt(ttl.Milliseconds(), 10)}, ","))
	out, err := child.StdoutPipe()
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
	lines := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	line := recv(t, lines, 10*time.Second, "the child leading")
	old, err := strconv.ParseInt(strings.TrimPrefix(line, "leading "), 10, 64)
	if err != nil {
		t.Fatalf("child: %q", line)
	}
	waitFor(t, 5*time.Second, "the child's first write", func() bool {
		_, mark, err := st.Read(t.Context(), key)
		return err == nil && mark == old
	})
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	r.Advance(ttl) // on miniredis, the lease runs out only so
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	wrote := make(chan int64, 1)
	done := leadAsync(ctx, l, "leader", func(ctx context.Context) error {
		token, _ := fencing.TokenFromContext(ctx)
		if err := st.Write(ctx, key, token, "new leader"); err != nil {
			t.Errorf("new leader's write: %v", err)
		}
		wrote <- token
		<-ctx.Done()
		return context.Cause(ctx)
	})
	next := recv(t, wrote, ttl+10*time.Second, "the new leader's write")
	took := time.Since(stopped)
	if err := child.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	line = recv(t, lines, 10*time.Second, "the child's write after SIGCONT")
	if want := fmt.Sprintf("refused %d %d", old, next); line != want {
		t.Fatalf("child after SIGCONT: got %q, want %q", line, want)
	}
	if v, mark, err := st.Read(t.Context(), key); err != nil || v != "new leader" || mark != next {
		t.Fatalf("store: got %q with mark %d (%v), want the new leader's value with mark %d", v, mark, err, next)
	}
	t.Logf("FIGURE stopped leader fenced: epoch %d led %v after the SIGSTOP of epoch %d (lease %v); the old leader's write after SIGCONT refused", next, took.Round(time.Millisecond), old, ttl)
	cancel()
	if err := waitErr(t, done, 5*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lead: got %v", err)
	}
}

// childStoppedLeader is the child of TestLeadStoppedProcessFenced: it leads and writes with
// its epoch every 10ms without looking at its context, until a write is refused.
func childStoppedLeader() {
	parts := strings.Split(os.Getenv("FENCEKIT_CHILD_STOPPED"), ",")
	if len(parts) != 5 {
		os.Exit(2)
	}
	db, _ := strconv.Atoi(parts[1])
	lease, _ := strconv.Atoi(parts[4])
	c := redis.NewClient(&redis.Options{Addr: parts[0], DB: db, DisableIdentity: true})
	l := fencing.New(c, fencing.WithPrefix(parts[2]), fencing.WithTTL(time.Duration(lease)*time.Millisecond))
	st := store.NewRedis(c)
	err := l.Lead(context.Background(), "leader", func(ctx context.Context) error {
		token, _ := fencing.TokenFromContext(ctx)
		fmt.Println("leading", token)
		for {
			err := st.Write(context.Background(), parts[3], token, "old leader")
			var stale *store.StaleTokenError
			if errors.As(err, &stale) {
				fmt.Println("refused", stale.Token, stale.Mark)
				return err
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	fmt.Println("child's Lead:", err)
	select {}
}
