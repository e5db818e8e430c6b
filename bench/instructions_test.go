package bench_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// envCallgrindPID names the environment variable with the process id of a redis-server
	// that runs under valgrind --tool=callgrind, for BenchmarkInstructions.
	envCallgrindPID = "FENCING_CALLGRIND_PID"
	// envCallgrindDir names the directory that server writes its dumps to, as
	// callgrind.out.<pid>.<n> (--callgrind-out-file=<dir>/callgrind.out.%p).
	envCallgrindDir = "FENCING_CALLGRIND_DIR"
)

// BenchmarkInstructions counts the instructions Redis itself executes per lock and release,
// the same three ways as BenchmarkUncontended (fencekit's TryAcquire + Release,
// bsm/redislock's Obtain + Release, SET NX PX + DEL), one goroutine. It needs a redis-server
// run under valgrind --tool=callgrind, named by FENCING_REDIS_ADDR, FENCING_CALLGRIND_PID and
// FENCING_CALLGRIND_DIR, and skips without them. Unlike time, the count does not depend on
// what else the machine does: it is the same to within 1% from one run to the next. Each row
// zeroes the server's counters with callgrind_control, runs b.N operations, dumps the
// counters and reports server-Ir/op. See README.md for the commands.
func BenchmarkInstructions(b *testing.B) {
	pid, dir := os.Getenv(envCallgrindPID), os.Getenv(envCallgrindDir)
	if pid == "" || dir == "" {
		b.Skip(envCallgrindPID + " and " + envCallgrindDir + " are not set: run a redis-server under callgrind (see README.md)")
	}
	t := standalone(b)
	client := t.newClient(nil)
	defer client.Close()
	ctx := context.Background()
	for _, op := range uncontendedOps(b, t, client) {
		b.Run(op.name, func(b *testing.B) {
			for i := range 100 { // warm up: scripts loaded, connections open
				if err := op.run(ctx, "w"+strconv.Itoa(i)); err != nil {
					b.Fatal(err)
				}
			}
			callgrind(b, "-z", pid)
			b.ResetTimer()
			for i := range b.N {
				if err := op.run(ctx, "u"+strconv.Itoa(i%100)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(dumpInstructions(b, dir, pid))/float64(b.N), "server-Ir/op")
		})
	}
}

// callgrind runs callgrind_control with args.
func callgrind(b *testing.B, args ...string) {
	b.Helper()
	if out, err := exec.Command("callgrind_control", args...).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control %v: %v\n%s", args, err, out)
	}
}

// dumps lists the callgrind dumps that glob matches.
func dumps(b *testing.B, glob string) []string {
	b.Helper()
	files, err := filepath.Glob(glob)
	if err != nil {
		b.Fatal(err)
	}
	return files
}

// instructions waits for a dump that glob matches and that is not in before, and returns
// its total instruction count.
func instructions(b *testing.B, glob string, before []string) int64 {
	b.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, f := range dumps(b, glob) {
			if slices.Contains(before, f) {
				continue
			}
			if n, ok := totals(f); ok {
				return n
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("no new callgrind dump matching %s", glob)
	return 0
}

// dumpInstructions makes the server of process pid, run under callgrind with its dumps in
// dir as callgrind.out.<pid>.<n>, dump its counters, which zeroes them, and returns the
// instructions it executed since its last dump, zeroing or start. The dump stays, for
// callgrind_annotate.
func dumpInstructions(b *testing.B, dir, pid string) int64 {
	b.Helper()
	glob := filepath.Join(dir, "callgrind.out."+pid+".*")
	before := dumps(b, glob)
	callgrind(b, "-d", pid)
	return instructions(b, glob, before)
}

// totals reads the "totals:" (or "summary:") line of a callgrind dump, once it is written.
func totals(path string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "totals:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			return n, err == nil
		}
		if rest, ok := strings.CutPrefix(line, "summary:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
