package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/dashboard"
	"github.com/fencekit/fencekit/fencing"
)

// The page mounted under /admin/locks/ of a service's mux; a lock taken with a label shows
// in its JSON form (and on its page, /admin/locks/lock?resource=order-42).
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locker := fencing.New(rdb)
	defer locker.Close()

	mux := http.NewServeMux()
	// In a real service, wrap it in the service's own access control.
	mux.Handle("/admin/locks/", http.StripPrefix("/admin/locks", dashboard.New(locker)))

	ctx := context.Background()
	lock, err := locker.TryAcquire(ctx, "order-42", fencing.WithTTL(time.Minute), fencing.WithLabel("export-42"))
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/admin/locks/api/lock?resource=order-42", nil))
	var got struct {
		Mode    string
		Holders []struct {
			Token int64
			Label string
		}
		NextToken int64 `json:"next_token"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		log.Fatal(err)
	}
	fmt.Println(rec.Code, got.Mode, got.Holders, "next token", got.NextToken)
	// Output: 200 exclusive [{1 export-42}] next token 2
}
