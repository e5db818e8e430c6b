package bench_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// envChild, set in the environment of a child process of BenchmarkOSProcesses, tells
// TestOSProcessChild what to run: "<addr>|<prefix>|<resource>|<contender>|<sections>".
const envChild = "FKBENCH_CHILD"

// osRows are BenchmarkOSProcesses's rows: a contender and how many processes run it.
var osRows = []struct {
	contender contender
	processes int
}{
	{fencekitAcquire, 2},
	{fencekitAcquire, 8},
	{fencekitDo, 8},
	{bsmRedislock, 8},
}

// BenchmarkOSProcesses runs rows of BenchmarkProcesses with each process a process of the
// operating system (this test binary started again, running TestOSProcessChild) with one
// goroutine, a client and, for fencekit, a Locker of its own: a grant then wakes a program
// that has nothing else to run, as in a deployment, where in BenchmarkProcesses it wakes a
// goroutine of the one Go program that runs every process. Each child takes its share of the
// b.N sections once every child has connected; the commands are counted from then on, so a
// child's start costs nothing. The figures are BenchmarkProcesses's (the floors measured by
// the parent), and the holds, dated by the children's wall clocks on this one machine, must
// not overlap. Against the standalone Redis of FENCING_REDIS_ADDR only:
//
//	cd bench && FENCING_REDIS_ADDR=127.0.0.1:6390 go test -run '^$' -bench OSProcesses -benchtime 3000x .
func BenchmarkOSProcesses(b *testing.B) {
	t := standalone(b)
	for _, r := range osRows {
		b.Run(fmt.Sprintf("%s/processes=%d", r.contender.name, r.processes), func(b *testing.B) {
			osContend(b, t, r.contender, r.processes)
		})
	}
}

// osChild is one child process of an osContend row.
type osChild struct {
	cmd   *exec.Cmd
	start io.WriteCloser // its standard input: it starts its sections when this is closed
	lines *bufio.Scanner // its standard output
}

// osContend runs b.N sections on one resource from processes child processes.
func osContend(b *testing.B, t *target, c contender, processes int) {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	resource := "o" + strconv.FormatInt(resourceSeq.Add(1), 10)
	ping, pub, handoff := floors(b, ctx, t, resource)
	children := make([]osChild, processes)
	for i := range children {
		share := b.N / processes
		if i < b.N%processes {
			share++
		}
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestOSProcessChild$", "-test.bench=^$", "-test.count=1")
		cmd.Env = append(os.Environ(), envChild+"="+strings.Join([]string{os.Getenv(envAddr), t.prefix, resource, c.name, strconv.Itoa(share)}, "|"))
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatalf("start a child: %v", err)
		}
		children[i] = osChild{cmd: cmd, start: in, lines: bufio.NewScanner(out)}
	}
	defer func() {
		for _, ch := range children {
			_ = ch.start.Close()
			_ = ch.cmd.Wait()
		}
	}()
	for i, ch := range children {
		if !ch.lines.Scan() || ch.lines.Text() != "ready" {
			b.Fatalf("child %d did not get ready: %q %v", i, ch.lines.Text(), ch.lines.Err())
		}
	}
	commands := t.commandCounter(b)
	scripts := scriptTime(b, t)
	b.ResetTimer()
	begin := time.Now()
	for _, ch := range children {
		_ = ch.start.Close()
	}
	var mu sync.Mutex
	var f rowFigures
	var last time.Time
	var wg sync.WaitGroup
	f.served = make([]int, processes)
	for i, ch := range children {
		wg.Go(func() {
			for ch.lines.Scan() {
				kind, rest, _ := strings.Cut(ch.lines.Text(), " ")
				fields := strings.Fields(rest)
				mu.Lock()
				switch {
				case kind == "s" && len(fields) == 3:
					wait, _ := strconv.ParseInt(fields[0], 10, 64)
					h0, _ := strconv.ParseInt(fields[1], 10, 64)
					h1, _ := strconv.ParseInt(fields[2], 10, 64)
					f.waits = append(f.waits, time.Duration(wait))
					f.spans = append(f.spans, span{time.Unix(0, h0), time.Unix(0, h1)})
					f.held += time.Duration(h1 - h0)
					f.served[i]++
				case kind == "PASS" && rest == "":
					// the test binary's own last line
				case kind == "done" && len(fields) == 1:
					at, _ := strconv.ParseInt(fields[0], 10, 64)
					if end := time.Unix(0, at); end.After(last) {
						last = end
					}
				default:
					b.Errorf("child %d: %s", i, ch.lines.Text())
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	f.cmds = commands()
	_, f.scriptUsec = scripts()
	f.elapsed = last.Sub(begin)
	f.ping, f.pub, f.handoff = ping, pub, handoff
	if got := len(f.waits); got != b.N {
		b.Fatalf("the children ran %d sections, want %d", got, b.N)
	}
	if n := overlaps(f.spans); n > 0 {
		b.Errorf("%d holds began before the one before them ended: two holders at once", n)
	}
	reportRow(b, f)
}

// overlaps counts the holds that began before the previous one, by start, ended.
func overlaps(holds []span) int {
	sorted := slices.Clone(holds)
	slices.SortFunc(sorted, func(a, b span) int { return a.start.Compare(b.start) })
	n := 0
	for i := 1; i < len(sorted); i++ {
		if sorted[i].start.Before(sorted[i-1].end) {
			n++
		}
	}
	return n
}

// TestOSProcessChild is a child process of BenchmarkOSProcesses, and does nothing otherwise:
// it connects, prints "ready", waits for its standard input to close, runs its sections and
// prints one line per section, "s <wait ns> <hold start> <hold end>" (Unix nanoseconds), then
// "done <Unix nanoseconds>"; an error is printed as a line of its own.
func TestOSProcessChild(t *testing.T) {
	spec := os.Getenv(envChild)
	if spec == "" {
		return
	}
	parts := strings.Split(spec, "|")
	if len(parts) != 5 {
		fmt.Printf("error: %s=%q\n", envChild, spec)
		return
	}
	addr, prefix, resource, name := parts[0], parts[1], parts[2], parts[3]
	sections, err := strconv.Atoi(parts[4])
	if err != nil {
		fmt.Printf("error: sections: %v\n", err)
		return
	}
	var c *contender
	for _, r := range osRows {
		if r.contender.name == name {
			c = &r.contender
		}
	}
	if c == nil {
		fmt.Printf("error: no contender %q\n", name)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	client := redis.NewClient(&redis.Options{Addr: addr, DB: standaloneDB, DisableIdentity: true, MaintNotificationsConfig: noMaint})
	defer client.Close()
	if err := client.Ping(ctx).Err(); err != nil {
		fmt.Printf("error: ping: %v\n", err)
		return
	}
	p := c.newProcess(client, prefix)
	defer p.close()
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	_ = out.Flush()
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	for range sections {
		t0 := time.Now()
		var h0, h1 time.Time
		err := p.section(ctx, resource, func() {
			h0 = time.Now()
			time.Sleep(holdTime)
			h1 = time.Now()
		})
		if err != nil {
			fmt.Fprintf(out, "error: %s: %v\n", name, err)
			break
		}
		fmt.Fprintf(out, "s %d %d %d\n", h0.Sub(t0), h0.UnixNano(), h1.UnixNano())
	}
	fmt.Fprintf(out, "done %d\n", time.Now().UnixNano())
	_ = out.Flush()
}
