package echofence_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	echo5 "github.com/labstack/echo/v5"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/echofencetest"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	fencemw5 "github.com/fencekit/fencekit/middleware-v5"
)

// BenchmarkIdempotent compares, on a real Redis and through the Echo v5 adapter, one route
// POST /payments/:id answered by a small JSON handler:
//
//   - "interleaved" sends, in every iteration, four requests in an order that rotates,
//     timing each, so that all see the same load (ns/op is their sum): the route bare, under
//     the Fence middleware alone (its default lock, on the payment), under Idempotent with a
//     fresh key (a first request: the lock, the handler, the commit with the release), and
//     under Idempotent with a key already stored (a replay), and under Idempotent with a
//     fresh key and a Keep that stores nothing ("uncommitted": everything but the commit
//     script, whose share it shows). It reports the added cost of each over the bare route
//     and their ratios.
//
//   - "fence", "first" and "replay" send requests of one kind alone and report the Redis
//     round trips each costs (a go-redis hook counting every command and pipeline sent)
//     and the locks taken (the Locker's hooks), and the allocations.
//
//   - "retries-100" sends 100 requests with one fresh key at once (MaxWait 10s) per
//     iteration and reports how many times the handler ran, how many replies differ from
//     the first, and the time until the last reply.
//
//     FENCING_REDIS_ADDR=127.0.0.1:6379 go test -run '^$' -bench Idempotent -benchtime 2000x -count 3 ./internal/echofence/
func BenchmarkIdempotent(b *testing.B) {
	if !redistest.Real() {
		b.Skip("set FENCING_REDIS_ADDR to a private Redis to compare the middlewares on a real server")
	}
	b.Run("interleaved", func(b *testing.B) {
		l, _ := benchLocker(b)
		nothingKept := fencemw5.IdempotentWithConfig(fencemw5.IdempotencyConfig{Locker: l, Keep: func(int) bool { return false }})
		rows := [...]*idemServer{newIdemServer(b, nil, ""), newIdemServer(b, fencemw5.Fence(l), ""),
			newIdemServer(b, fencemw5.Idempotent(l), "first"), newIdemServer(b, fencemw5.Idempotent(l), "replay"),
			newIdemServer(b, nothingKept, "first")}
		const bare, fence, first, replay, uncommitted = 0, 1, 2, 3, 4
		var total [len(rows)]time.Duration
		i := 0
		for b.Loop() {
			for k := range rows {
				k = (k + i) % len(rows)
				begin := time.Now()
				rows[k].serve(b, i)
				total[k] += time.Since(begin)
			}
			i++
		}
		added := func(k int) float64 { return float64(total[k] - total[bare]) }
		n := float64(b.N)
		b.ReportMetric(added(fence)/n/1e3, "fence-added-µs/req")
		b.ReportMetric(added(first)/n/1e3, "first-added-µs/req")
		b.ReportMetric(added(replay)/n/1e3, "replay-added-µs/req")
		b.ReportMetric(added(first)/added(fence), "first/fence-added")
		b.ReportMetric(float64(total[first])/float64(total[fence]), "first/fence")
		b.ReportMetric(added(replay)/added(fence), "replay/fence-added")
		b.ReportMetric(added(uncommitted)/added(fence), "uncommitted/fence-added")
	})
	for _, row := range []struct{ name, key string }{{"fence", ""}, {"first", "first"}, {"replay", "replay"}} {
		b.Run(row.name, func(b *testing.B) {
			r := redistest.New(b)
			var trips redistest.Trips
			var taken echofencetest.Acquisitions
			c := r.NewClient(b)
			c.AddHook(&trips)
			l := fencing.New(c, fencing.WithPrefix(r.Prefix), fencing.WithHooks(taken.Hooks()))
			b.Cleanup(func() { _ = l.Close() })
			mw := fencemw5.Fence(l)
			if row.key != "" {
				mw = fencemw5.Idempotent(l)
			}
			s := newIdemServer(b, mw, row.key)
			s.serve(b, -1) // the scripts loaded and the connection open before the count
			trips0, taken0 := trips.Load(), taken.Load()
			cmds0 := commands(b, r.Client)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s.serve(b, i)
				i++
			}
			b.StopTimer()
			b.ReportMetric(float64(trips.Load()-trips0)/float64(b.N), "round-trips/req")
			b.ReportMetric(float64(taken.Load()-taken0)/float64(b.N), "locks/req")
			// The INFO after cmds0 is one command more.
			b.ReportMetric(float64(commands(b, r.Client)-cmds0-1)/float64(b.N), "cmds/req")
		})
	}
	b.Run("retries-100", func(b *testing.B) {
		const n = 100
		l, _ := benchLocker(b)
		mw := fencemw5.IdempotentWithConfig(fencemw5.IdempotencyConfig{Locker: l, MaxWait: 10 * time.Second})
		s := newIdemServer(b, mw, "first")
		var runs, differ int64
		i := 0
		for b.Loop() {
			bodies := make([][]byte, n)
			var wg sync.WaitGroup
			for k := range n {
				wg.Go(func() {
					rec := httptest.NewRecorder()
					s.e.ServeHTTP(rec, s.request(i))
					if rec.Code != http.StatusCreated {
						b.Errorf("got status %d, want 201", rec.Code)
					}
					bodies[k] = rec.Body.Bytes()
				})
			}
			wg.Wait()
			for _, body := range bodies {
				if !bytes.Equal(body, bodies[0]) {
					differ++
				}
			}
			i++
		}
		runs = s.runs.Load()
		b.ReportMetric(float64(runs)/float64(b.N), "handler-runs/op")
		b.ReportMetric(float64(differ)/float64(b.N), "differing-replies/op")
	})
}

// idemServer is an Echo v5 with the route POST /payments/:id, behind mw when it is not nil,
// and the requests of one row: no key, a fresh key per request ("first"), or one key whose
// result is stored ("replay").
type idemServer struct {
	e    *echo5.Echo
	keys string
	runs atomic.Int64
	w    *discardWriter
}

func newIdemServer(b *testing.B, mw echo5.MiddlewareFunc, keys string) *idemServer {
	s := &idemServer{e: echo5.New(), keys: keys, w: &discardWriter{h: http.Header{}}}
	var mws []echo5.MiddlewareFunc
	if mw != nil {
		mws = append(mws, mw)
	}
	s.e.POST("/payments/:id", func(c *echo5.Context) error {
		n := s.runs.Add(1)
		body, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		c.Response().Header().Set("Location", "/payments/"+c.Param("id"))
		return c.JSON(http.StatusCreated, map[string]any{"id": c.Param("id"), "run": n, "amount": string(body)})
	}, mws...)
	return s
}

// request returns request i of the row: payment i modulo 1024 (each leaves a fence counter).
func (s *idemServer) request(i int) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, "/payments/"+strconv.Itoa(i&0x3ff), bytes.NewReader([]byte(`{"amount":100}`)))
	switch s.keys {
	case "first":
		req.Header.Set("Idempotency-Key", "pay-"+strconv.Itoa(i))
	case "replay":
		req.URL.Path = "/payments/7"
		req.Header.Set("Idempotency-Key", "stored")
	}
	return req
}

// serve sends request i and checks the answer.
func (s *idemServer) serve(b *testing.B, i int) {
	s.w.code = 0
	clear(s.w.h)
	s.e.ServeHTTP(s.w, s.request(i))
	if s.w.code != http.StatusCreated {
		b.Fatalf("got status %d, want 201", s.w.code)
	}
}
