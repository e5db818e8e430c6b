package redisproc_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/internal/testkit/redisproc"
)

// TestServerBinary checks that the server started is the executable FENCING_REDIS_SERVER
// names (redis-server from PATH when it is unset), as INFO server reports it.
func TestServerBinary(t *testing.T) {
	want := os.Getenv(redisproc.EnvServer)
	if want == "" {
		want = "redis-server"
	}
	s := redisproc.Start(t)
	path, err := exec.LookPath(want)
	if err != nil {
		t.Fatal(err)
	}
	if path, err = filepath.Abs(path); err != nil {
		t.Fatal(err)
	}
	text, err := s.Do(ctx(t), "INFO", "server").Text()
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "executable:"); ok {
			got = v
		}
	}
	if got != path {
		t.Errorf("INFO server executable: got %q, want %q", got, path)
	}
}

// requireRecorder records what Require does with a test instead of ending it.
type requireRecorder struct {
	testing.TB
	fatal, skip string
}

func (r *requireRecorder) Helper()                           {}
func (r *requireRecorder) Fatalf(format string, args ...any) { r.fatal = format }
func (r *requireRecorder) Skip(args ...any)                  { r.skip = "skip" }

// TestRequireMissingServer checks that a server named with FENCING_REDIS_SERVER that does not
// exist fails the test instead of skipping it, and that a relative path is not looked up on PATH.
func TestRequireMissingServer(t *testing.T) {
	for _, name := range []string{filepath.Join(t.TempDir(), "no-such-server"), "../no-such-dir/valkey-server", "no-such-server-on-path"} {
		t.Setenv(redisproc.EnvServer, name)
		if redisproc.Available() {
			t.Fatalf("%s: Available reports true", name)
		}
		rec := &requireRecorder{TB: t}
		redisproc.Require(rec)
		if rec.fatal == "" || rec.skip != "" {
			t.Errorf("%s: Require: fatal %q, skip %q; want a failure, no skip", name, rec.fatal, rec.skip)
		}
	}
}
