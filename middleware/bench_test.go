package middleware

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/labstack/echo/v4"
)

// The benchmarks compare one route with and without the middleware, each request on a
// resource of its own, and measure the Redis round trip in the same run: the middleware
// should cost about two round trips (acquire, release) per request.
//
//	FENCING_REDIS_ADDR=127.0.0.1:6379 go test -run '^$' -bench . -benchtime 2s -count 3 ./middleware/
//
// Without FENCING_REDIS_ADDR only the bare handler runs: miniredis round trips say nothing
// about a real server.

func BenchmarkFence(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		benchSerial(b, benchEcho(nil))
	})
	b.Run("fenced", func(b *testing.B) {
		v := benchRedis(b)
		benchSerial(b, benchEcho(v.fence(b)))
	})
	b.Run("fenced-vs-RTT", func(b *testing.B) {
		// Each iteration sends a fenced request, a bare one, a PING, a SET NX PX + DEL pair,
		// a Locker.Do with an empty function and a TryAcquire + Release pair, timing each, so
		// that all of them see the same load; ns/op is their sum. The metrics give the
		// middleware's cost (fenced - bare) in round trips, and the share of the core.
		v := benchRedis(b)
		ctx := context.Background()
		noop := func(context.Context) error { return nil }
		ops := [...]func(int){
			benchEcho(v.fence(b)).serveOne(b),
			benchEcho(nil).serveOne(b),
			func(int) {
				if err := v.r.Client.Ping(ctx).Err(); err != nil {
					b.Fatal(err)
				}
			},
			v.setNXDel(b),
			func(i int) {
				if err := v.locker.Do(ctx, "do:"+strconv.Itoa(i&0x3ff), noop, fencing.WithMaxWait(0)); err != nil {
					b.Fatal(err)
				}
			},
			func(i int) {
				lock, err := v.locker.TryAcquire(ctx, "try:"+strconv.Itoa(i&0x3ff))
				if err == nil {
					err = lock.Release(ctx)
				}
				if err != nil {
					b.Fatal(err)
				}
			},
		}
		var total [len(ops)]time.Duration
		i := 0
		for b.Loop() {
			for k, op := range ops {
				begin := time.Now()
				op(i)
				total[k] += time.Since(begin)
			}
			i++
		}
		added, ping := float64(total[0]-total[1]), float64(total[2])
		b.ReportMetric(added/float64(b.N), "added-ns/op")
		b.ReportMetric(added/ping, "added-PINGs/op")
		b.ReportMetric(added/float64(total[3]), "added-SETNX+DEL/op")
		b.ReportMetric(float64(total[4])/ping, "Do-PINGs/op")
		b.ReportMetric(float64(total[5])/ping, "TryAcquire+Release-PINGs/op")
	})
	b.Run("bare-parallel", func(b *testing.B) {
		benchParallel(b, benchEcho(nil))
	})
	b.Run("fenced-parallel", func(b *testing.B) {
		v := benchRedis(b)
		benchParallel(b, benchEcho(v.fence(b)))
	})
	b.Run("redis-PING", func(b *testing.B) {
		v := benchRedis(b)
		b.ReportAllocs()
		for b.Loop() {
			if err := v.r.Client.Ping(context.Background()).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("redis-SETNX+DEL", func(b *testing.B) {
		v := benchRedis(b)
		op := v.setNXDel(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			op(i)
			i++
		}
	})
}

type benchEnv struct {
	r      *redistest.Redis
	locker *fencing.Locker
}

// benchRedis skips the benchmark unless FENCING_REDIS_ADDR names a real Redis.
func benchRedis(b *testing.B) *benchEnv {
	b.Helper()
	if !redistest.Real() {
		b.Skip("set FENCING_REDIS_ADDR to benchmark against a real Redis")
	}
	r := redistest.New(b)
	l := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	b.Cleanup(func() { _ = l.Close() })
	return &benchEnv{r: r, locker: l}
}

func (v *benchEnv) fence(b *testing.B) echo.MiddlewareFunc {
	mw, err := Config{Locker: v.locker}.ToMiddleware()
	if err != nil {
		b.Fatal(err)
	}
	return mw
}

// setNXDel returns one raw lock round: SET NX PX, then DEL.
func (v *benchEnv) setNXDel(b *testing.B) func(i int) {
	return func(i int) {
		ctx := context.Background()
		key := v.r.Prefix + "raw:" + strconv.Itoa(i&0x3ff)
		if err := v.r.Client.SetNX(ctx, key, "owner", 30*time.Second).Err(); err != nil {
			b.Fatal(err)
		}
		if err := v.r.Client.Del(ctx, key).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

type benchServer struct{ e *echo.Echo }

// benchEcho returns an Echo with one route, PUT /items/:id, behind mw when it is not nil.
func benchEcho(mw echo.MiddlewareFunc) benchServer {
	e := echo.New()
	e.Logger.SetOutput(io.Discard)
	var mws []echo.MiddlewareFunc
	if mw != nil {
		mws = append(mws, mw)
	}
	e.PUT("/items/:id", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }, mws...)
	return benchServer{e}
}

// serveOne returns a function that sends one request, for resource i modulo 1024: each
// resource leaves its token counter in Redis, so the benchmark reuses a thousand of them.
func (s benchServer) serveOne(b *testing.B) func(i int) {
	req, _ := http.NewRequest(http.MethodPut, "/items/0", nil)
	w := &discardWriter{h: http.Header{}}
	return func(i int) {
		req.URL.Path = "/items/" + strconv.Itoa(i&0x3ff)
		w.code = 0
		s.e.ServeHTTP(w, req)
		if w.code != http.StatusNoContent {
			b.Fatalf("got status %d, want 204", w.code)
		}
	}
}

func benchSerial(b *testing.B, s benchServer) {
	serve := s.serveOne(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		serve(i)
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

func benchParallel(b *testing.B, s benchServer) {
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		serve := s.serveOne(b)
		for pb.Next() {
			serve(int(next.Add(1)))
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
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
