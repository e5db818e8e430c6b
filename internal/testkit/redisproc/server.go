package redisproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

const (
	// logName and stdioName are the server's log file and its captured stdout and stderr,
	// both inside its directory.
	logName   = "redis.log"
	stdioName = "stdio.log"
	// portAttempts bounds how many fresh ports Start tries when a port is taken.
	portAttempts = 5
	// tailLines is how many lines of each log LogTail returns.
	tailLines = 40
)

// errAddrInUse means the server exited because its port was taken.
var errAddrInUse = errors.New("address already in use")

// Server is a redis-server process owned by one test. Its port and directory stay the
// same across Restart; its process id does not. See the package documentation for
// which methods may be called from other goroutines.
type Server struct {
	tb      testing.TB
	bin     string
	dir     string
	port    int
	busPort int // cluster bus port, or 0 outside cluster mode
	cfg     config

	mu      sync.Mutex
	proc    *process      // the running process, or nil
	admin   *redis.Client // connected to the current process, for Do and the waits
	primary string        // "host port" given to --replicaof on restart, or "" for a primary
}

// Start starts a redis-server for t and waits until it answers PING. The server is
// killed, and its files removed, when t ends. Start skips t when redis-server is not on
// PATH and fails t, with the tail of the server's log, when the server does not come up
// within the timeout. With ReplicaOf it also waits until the replica has synced.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	Require(t)
	bin, err := exec.LookPath(binary())
	if err != nil {
		t.Fatalf("redisproc: %v", err)
	}
	cfg := newConfig(opts)
	if cfg.cluster && cfg.replicaOf != nil {
		t.Fatalf("redisproc: ReplicaOf and ClusterMode cannot be combined")
	}
	s := &Server{tb: t, bin: bin, dir: t.TempDir(), cfg: cfg}
	if cfg.replicaOf != nil {
		s.primary = "127.0.0.1 " + strconv.Itoa(cfg.replicaOf.Port())
	}
	// Registered after t.TempDir, so it runs first: the process is dead before its
	// directory is removed.
	t.Cleanup(s.cleanup)

	deadline := time.Now().Add(cfg.timeout)
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(2)
		if err != nil {
			t.Fatalf("redisproc: %v", err)
		}
		s.port = ports[0]
		if cfg.cluster {
			s.busPort = ports[1]
		}
		err = s.launch(deadline)
		if err == nil {
			break
		}
		if !errors.Is(err, errAddrInUse) || attempt == portAttempts {
			t.Fatalf("redisproc: start redis-server on %s: %v\n%s", s.Addr(), err, s.LogTail())
		}
	}
	if cfg.replicaOf != nil {
		cfg.replicaOf.WaitSynced(s)
	}
	return s
}

// args returns the command line for the next launch.
func (s *Server) args() []string {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--enable-debug-command", "local",
		"--repl-diskless-sync-delay", "0",
		"--logfile", filepath.Join(s.dir, logName),
		"--daemonize", "no",
	}
	if s.cfg.cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
			"--cluster-node-timeout", "2000",
			"--cluster-port", strconv.Itoa(s.busPort),
		)
	}
	s.mu.Lock()
	primary := s.primary
	s.mu.Unlock()
	if primary != "" {
		args = append(args, "--replicaof", primary)
	}
	return append(args, s.cfg.args...)
}

// launch starts a process on s.port and waits until it answers PING or the deadline
// passes. It returns an error wrapping errAddrInUse when the process exited because the
// port was taken. On failure no process is left running.
func (s *Server) launch(deadline time.Time) error {
	logPath := filepath.Join(s.dir, logName)
	var logOffset int64
	if fi, err := os.Stat(logPath); err == nil {
		logOffset = fi.Size()
	}
	stdio, err := os.OpenFile(filepath.Join(s.dir, stdioName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	p, err := spawn(s.cfg.under, s.bin, s.args(), s.cfg.env, stdio)
	_ = stdio.Close() // the child holds its own descriptor
	if err != nil {
		return err
	}
	addr := s.Addr()
	err = waitFor(deadline, p.done, func() (bool, string) {
		reply, err := probe(addr, 250*time.Millisecond, "PING")
		if err != nil {
			return false, "PING: " + err.Error()
		}
		return reply == "+PONG", "PING: " + reply
	})
	if err != nil {
		_ = p.signal(syscall.SIGKILL)
		p.wait(s.cfg.timeout)
		if errors.Is(err, errStopped) && strings.Contains(readFrom(logPath, logOffset), "Address already in use") {
			return fmt.Errorf("%w (%s)", errAddrInUse, p.exitState())
		}
		return fmt.Errorf("%v (%s)", err, p.exitState())
	}
	// Another server may have taken the port first and answered the PING.
	admin := s.adminClient()
	if err := checkPID(admin, p.pid(), remaining(deadline)); err != nil {
		_ = admin.Close()
		_ = p.signal(syscall.SIGKILL)
		p.wait(s.cfg.timeout)
		return fmt.Errorf("%w: %v", errAddrInUse, err)
	}
	s.mu.Lock()
	old := s.admin
	s.proc, s.admin = p, admin
	s.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	return nil
}

// adminClient returns the internal client for a new process: it never retries, so
// that Do sends each command at most once.
func (s *Server) adminClient() *redis.Client {
	opt := s.clientOptions()
	opt.MaxRetries = -1
	return redis.NewClient(opt)
}

// checkPID verifies that the server behind client is the process pid.
func checkPID(client *redis.Client, pid int, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	text, err := client.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("INFO server: %w", err)
	}
	if got := parseFields(text)["process_id"]; got != strconv.Itoa(pid) {
		return fmt.Errorf("the port is served by process %s, not by %d", got, pid)
	}
	return nil
}

// cleanup runs when the test ends: it logs the tail of the log if the test failed, kills
// the process and closes the internal client.
func (s *Server) cleanup() {
	if s.tb.Failed() {
		s.tb.Logf("redisproc: log of %s:\n%s", s.Addr(), s.LogTail())
	}
	s.Kill()
	s.mu.Lock()
	admin := s.admin
	s.admin = nil
	s.mu.Unlock()
	if admin != nil {
		_ = admin.Close()
	}
}

// Addr returns the server's address, "127.0.0.1:<port>".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's TCP port, which Restart keeps.
func (s *Server) Port() int { return s.port }

// Dir returns the server's working directory (--dir), which holds its log, RDB, AOF and
// nodes.conf and is removed when the test ends.
func (s *Server) Dir() string { return s.dir }

// PID returns the process id of the running server, or 0 when it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.pid()
}

// clientOptions returns go-redis options for the server: no CLIENT SETINFO and no
// maintenance notifications, which the server does not know.
func (s *Server) clientOptions() *redis.Options {
	return &redis.Options{
		Addr:                     s.Addr(),
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// Client returns a new client for the server, closed when t ends. Each configure
// function may change the options first (timeouts, retries, protocol). The client keeps
// working across Restart, reconnecting as go-redis does.
func (s *Server) Client(t testing.TB, configure ...func(*redis.Options)) *redis.Client {
	t.Helper()
	opt := s.clientOptions()
	for _, f := range configure {
		f(opt)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Do sends one command to the server through an internal client and returns its
// result. The command is sent at most once, with no retry. When the server is not
// running the command fails.
func (s *Server) Do(ctx context.Context, args ...any) *redis.Cmd {
	s.mu.Lock()
	admin := s.admin
	s.mu.Unlock()
	if admin == nil {
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetErr(fmt.Errorf("redisproc: server %s is not running", s.Addr()))
		return cmd
	}
	return admin.Do(ctx, args...)
}

// info returns the fields of INFO section as a map, waiting at most d.
func (s *Server) info(d time.Duration, section string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	text, err := s.Do(ctx, "INFO", section).Text()
	if err != nil {
		return nil, err
	}
	return parseFields(text), nil
}

// parseFields parses "key:value" lines, as INFO and CLUSTER INFO return them.
func parseFields(text string) map[string]string {
	fields := make(map[string]string)
	for line := range strings.Lines(text) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok {
			fields[k] = v
		}
	}
	return fields
}

// LogTail returns the last lines of the server's log and of its captured stdout and
// stderr, for failure messages.
func (s *Server) LogTail() string {
	var b strings.Builder
	for _, name := range []string{logName, stdioName} {
		text := tail(filepath.Join(s.dir, name), tailLines)
		if text == "" {
			continue
		}
		fmt.Fprintf(&b, "--- %s (last %d lines) ---\n%s", filepath.Join(s.dir, name), tailLines, text)
		if !strings.HasSuffix(text, "\n") {
			b.WriteByte('\n')
		}
	}
	if b.Len() == 0 {
		return "(the server wrote no log)"
	}
	return b.String()
}

// tail returns the last n lines of the file at path, or "" when it cannot be read.
func tail(path string, n int) string {
	const maxRead = 64 << 10
	var offset int64
	if fi, err := os.Stat(path); err == nil && fi.Size() > maxRead {
		offset = fi.Size() - maxRead
	}
	lines := strings.SplitAfter(readFrom(path, offset), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// readFrom returns the contents of the file at path from offset on, or "" when it cannot
// be read.
func readFrom(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return ""
	}
	return string(b)
}
