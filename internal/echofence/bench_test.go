package echofence_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	echo4 "github.com/labstack/echo/v4"
	echo5 "github.com/labstack/echo/v5"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	fencemw4 "github.com/fencekit/fencekit/middleware"
	fencemw5 "github.com/fencekit/fencekit/middleware-v5"
)

// BenchmarkMajors compares the Echo v5 middleware with the Echo v4 one on a real Redis, each
// request on a resource of its own (1,024 of them, reused):
//
//   - "interleaved" sends, in every iteration, a fenced and a bare request through each
//     major, in an order that rotates, timing each, so that all four see the same load; ns/op
//     is their sum. It reports each major's added cost (fenced - bare) per request and the
//     v5/v4 ratio of the added costs.
//   - "v4/fenced", "v4/bare", "v5/fenced" and "v5/bare" send requests of one kind alone and
//     report the Redis commands each request costs, from the change in INFO stats
//     total_commands_processed (commands that scripts run count, as Redis counts them), and
//     the allocations.
//
// Run it on a private Redis that nothing else uses, or the command counts include others':
//
//	FENCING_REDIS_ADDR=127.0.0.1:6381 go test -run '^$' -bench Majors -benchtime 3000x -count 5 ./internal/echofence/
func BenchmarkMajors(b *testing.B) {
	if !redistest.Real() {
		b.Skip("set FENCING_REDIS_ADDR to a private Redis to compare the majors on a real server")
	}
	b.Run("interleaved", func(b *testing.B) {
		l, _ := benchLocker(b)
		servers := [...]*benchServer{newV4(b, l, true), newV4(b, l, false), newV5(b, l, true), newV5(b, l, false)}
		var total [len(servers)]time.Duration
		i := 0
		for b.Loop() {
			for k := range servers {
				k = (k + i) % len(servers)
				begin := time.Now()
				servers[k].serve(b, i)
				total[k] += time.Since(begin)
			}
			i++
		}
		v4, v5 := float64(total[0]-total[1]), float64(total[2]-total[3])
		b.ReportMetric(v4/float64(b.N)/1e3, "v4-added-µs/req")
		b.ReportMetric(v5/float64(b.N)/1e3, "v5-added-µs/req")
		b.ReportMetric(v5/v4, "v5/v4-added")
		b.ReportMetric(float64(total[3])/float64(total[1]), "v5/v4-bare")
	})
	for _, major := range []struct {
		name string
		new  func(b *testing.B, l *fencing.Locker, fenced bool) *benchServer
	}{{"v4", newV4}, {"v5", newV5}} {
		for _, row := range []struct {
			name   string
			fenced bool
			opts   []fencing.Option
		}{
			{"bare", false, nil}, {"fenced", true, nil},
			// The routes whose names the clients choose (docs/echo.md).
			{"fenced-expiry", true, []fencing.Option{fencing.WithCounterExpiry(time.Hour)}},
		} {
			name, fenced := major.name+"/"+row.name, row.fenced
			b.Run(name, func(b *testing.B) {
				l, r := benchLocker(b, row.opts...)
				s := major.new(b, l, fenced)
				s.serve(b, 0) // the client's connection is open before the count starts
				before := commands(b, r.Client)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					s.serve(b, i)
					i++
				}
				b.StopTimer()
				// One INFO (the first) is counted in the change.
				b.ReportMetric(float64(commands(b, r.Client)-before-1)/float64(b.N), "cmds/req")
			})
		}
	}
}

// benchLocker returns a Locker on the benchmark's Redis, with a prefix of its own, and the
// Redis.
func benchLocker(b *testing.B, opts ...fencing.Option) (*fencing.Locker, *redistest.Redis) {
	b.Helper()
	r := redistest.New(b)
	l := fencing.New(r.Client, append([]fencing.Option{fencing.WithPrefix(r.Prefix)}, opts...)...)
	b.Cleanup(func() { _ = l.Close() })
	return l, r
}

// commands returns INFO stats total_commands_processed.
func commands(b *testing.B, c *redis.Client) int64 {
	b.Helper()
	return infoField(b, c, "stats", "total_commands_processed")
}

// infoField returns a number from a section of INFO.
func infoField(b *testing.B, c *redis.Client, section, field string) int64 {
	b.Helper()
	info, err := c.Info(context.Background(), section).Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("no %s in INFO %s", field, section)
	return 0
}

// benchServer is one Echo, of either major, with the route PUT /items/:id, fenced or bare.
type benchServer struct {
	h   http.Handler
	req *http.Request
	w   *discardWriter
}

func newV4(b *testing.B, l *fencing.Locker, fenced bool) *benchServer {
	e := echo4.New()
	var mws []echo4.MiddlewareFunc
	if fenced {
		mw, err := fencemw4.Config{Locker: l}.ToMiddleware()
		if err != nil {
			b.Fatal(err)
		}
		mws = append(mws, mw)
	}
	e.PUT("/items/:id", func(c echo4.Context) error { return c.NoContent(http.StatusNoContent) }, mws...)
	return newBenchServer(e)
}

func newV5(b *testing.B, l *fencing.Locker, fenced bool) *benchServer {
	e := echo5.New()
	var mws []echo5.MiddlewareFunc
	if fenced {
		mw, err := fencemw5.Config{Locker: l}.ToMiddleware()
		if err != nil {
			b.Fatal(err)
		}
		mws = append(mws, mw)
	}
	e.PUT("/items/:id", func(c *echo5.Context) error { return c.NoContent(http.StatusNoContent) }, mws...)
	return newBenchServer(e)
}

func newBenchServer(h http.Handler) *benchServer {
	req, _ := http.NewRequest(http.MethodPut, "/items/0", nil)
	return &benchServer{h: h, req: req, w: &discardWriter{h: http.Header{}}}
}

// serve sends one request for resource i modulo 1024: each resource leaves its token
// counter in Redis, so the benchmark reuses a thousand of them.
func (s *benchServer) serve(b *testing.B, i int) {
	s.req.URL.Path = "/items/" + strconv.Itoa(i&0x3ff)
	s.w.code = 0
	clear(s.w.h)
	s.h.ServeHTTP(s.w, s.req)
	if s.w.code != http.StatusNoContent {
		b.Fatalf("got status %d, want 204", s.w.code)
	}
}

// discardWriter is a ResponseWriter that keeps only the status.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header { return w.h }

func (w *discardWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(p), nil
}

func (w *discardWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

// BenchmarkUntrustedNames sends b.N requests, each with an id of its own, through the Echo
// v5 middleware (Namespace "order", as in examples/echov5) from 16 goroutines, and reports
// what they leave in Redis: the keys ("keys") and the growth of INFO memory's used_memory
// per name ("B/name") right after the last request, and, with counter expiry, again once
// the idle period has passed ("keys-idle", "B/name-idle"; it waits up to two minutes for
// Redis to expire the counters). Ids are either short (the request's number, up to 7
// digits) or of fencemw.MaxKeyLen (1,024) bytes, the longest a request may give. The
// Locker either keeps counters for ever (the default) or lets them expire after 1s
// (WithCounterExpiry(time.Second), WithTTL(time.Second); the mechanism is the same for the
// hour docs/echo.md recommends). It deletes its keys afterwards. Run it on a private,
// otherwise idle Redis:
//
//	FENCING_REDIS_ADDR=127.0.0.1:6381 go test -run '^$' -bench UntrustedNames -benchtime 100000x -timeout 20m ./internal/echofence/
func BenchmarkUntrustedNames(b *testing.B) {
	if !redistest.Real() {
		b.Skip("measures a real Redis's memory; set FENCING_REDIS_ADDR to a private Redis")
	}
	for _, ids := range []struct {
		name string
		id   func(i int64) string
	}{
		{"short-ids", func(i int64) string { return strconv.FormatInt(i, 10) }},
		{"1KiB-ids", func(i int64) string {
			n := strconv.FormatInt(i, 10)
			return strings.Repeat("0", fencemw5.MaxKeyLen-len(n)) + n
		}},
	} {
		for _, mode := range []struct {
			name string
			opts []fencing.Option
		}{
			{"never", nil},
			{"expiry=1s", []fencing.Option{fencing.WithCounterExpiry(time.Second), fencing.WithTTL(time.Second)}},
		} {
			b.Run(ids.name+"/"+mode.name, func(b *testing.B) {
				r := redistest.New(b)
				// A prefix about as long as the default "fencing:", so that B/name is what a
				// service would see; unique to the process, and its keys are deleted below.
				prefix := fmt.Sprintf("fkb%d:", os.Getpid())
				ctx := context.Background()
				l := fencing.New(r.Client, append([]fencing.Option{fencing.WithPrefix(prefix)}, mode.opts...)...)
				defer l.Close()
				e := echo5.New()
				e.PUT("/orders/:id", func(c *echo5.Context) error { return c.NoContent(http.StatusNoContent) },
					fencemw5.FenceWithConfig(fencemw5.Config{Locker: l, Namespace: "order"}))
				keys, memory := r.Client.DBSize(ctx).Val(), usedMemory(b, r.Client)

				var next atomic.Int64
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() {
						w := &discardWriter{h: http.Header{}}
						for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
							w.code = 0
							e.ServeHTTP(w, httptest.NewRequest(http.MethodPut, "/orders/"+ids.id(i), nil))
							if w.code != http.StatusNoContent {
								b.Errorf("got status %d, want 204", w.code)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(r.Client.DBSize(ctx).Val()-keys), "keys")
				b.ReportMetric(float64(usedMemory(b, r.Client)-memory)/float64(b.N), "B/name")
				if len(mode.opts) > 0 {
					deadline := time.Now().Add(2 * time.Minute)
					for r.Client.DBSize(ctx).Val() > keys && time.Now().Before(deadline) {
						time.Sleep(250 * time.Millisecond)
					}
					b.ReportMetric(float64(r.Client.DBSize(ctx).Val()-keys), "keys-idle")
					b.ReportMetric(float64(usedMemory(b, r.Client)-memory)/float64(b.N), "B/name-idle")
				}
				deletePrefix(b, r.Client, prefix)
			})
		}
	}
}

// usedMemory returns INFO memory's used_memory.
func usedMemory(b *testing.B, c *redis.Client) int64 {
	b.Helper()
	return infoField(b, c, "memory", "used_memory")
}

// deletePrefix unlinks every key under prefix, in batches.
func deletePrefix(b *testing.B, c *redis.Client, prefix string) {
	ctx := context.Background()
	iter := c.Scan(ctx, 0, prefix+"*", 10000).Iterator()
	batch := make([]string, 0, 1000)
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == cap(batch) {
			c.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		c.Unlink(ctx, batch...)
	}
	if err := iter.Err(); err != nil {
		b.Fatal(err)
	}
}
