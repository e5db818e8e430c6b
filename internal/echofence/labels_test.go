package echofence_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	echo4 "github.com/labstack/echo/v4"
	mw4 "github.com/labstack/echo/v4/middleware"
	echo5 "github.com/labstack/echo/v5"
	mw5 "github.com/labstack/echo/v5/middleware"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	fencemw4 "github.com/fencekit/fencekit/middleware"
	fencemw5 "github.com/fencekit/fencekit/middleware-v5"
)

// labelCase is one request of TestLabels and the label its locks must carry.
type labelCase struct {
	name      string
	path      string // the route: see labelRoutes
	requestID string // the request's X-Request-Id header, "" for none
	want      func(responseID string) string
}

// longID is a request ID over fencing.MaxLabelLen bytes: its label keeps its start and end.
var longID = "req-" + strings.Repeat("0123456789", 10) + "-end"

var labelCases = []labelCase{
	// Echo's RequestID middleware makes an ID and sets it on the response.
	{name: "RequestID's new ID", path: "/ided/1", want: func(id string) string { return id }},
	// It keeps the client's; so does the Fence without it, from the request.
	{name: "RequestID keeps the client's", path: "/ided/1", requestID: "req-42", want: func(string) string { return "req-42" }},
	{name: "the request's header", path: "/plain/1", requestID: "req-43", want: func(string) string { return "req-43" }},
	{name: "no ID", path: "/plain/1", want: func(string) string { return "" }},
	{name: "long ID fitted", path: "/plain/1", requestID: longID,
		want: func(string) string { return longID[:30] + "…" + longID[len(longID)-31:] }},
	{name: "Config.Label wins", path: "/own/1", requestID: "req-44", want: func(string) string { return "PUT /own/:id" }},
	{name: "KeysExtractor", path: "/pair/1", requestID: "req-45", want: func(string) string { return "req-45" }},
	{name: "Idempotent", path: "/pay/1", requestID: "req-46", want: func(string) string { return "req-46" }},
	{name: "IdempotencyConfig.Label wins", path: "/paymine/1", requestID: "req-47", want: func(string) string { return "payment" }},
}

// TestLabels sends requests through both Echo majors, whose handlers read the holders of
// their locks with Locker.Inspect: each lock is labelled with the request's ID (Echo's
// RequestID middleware's, on the response, or else the request's header), fitted when too
// long, or with Config.Label's or IdempotencyConfig.Label's when given.
func TestLabels(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	defer l.Close()
	// labels returns the labels of the holders of resources.
	labels := func(ctx context.Context, resources ...string) (string, error) {
		var got []string
		for _, res := range resources {
			st, err := l.Inspect(ctx, res)
			if err != nil {
				return "", err
			}
			for _, h := range st.Holders {
				got = append(got, h.Label)
			}
		}
		if len(got) != len(resources) {
			return fmt.Sprintf("%d holders of %d resources", len(got), len(resources)), nil
		}
		for _, g := range got[1:] {
			if g != got[0] {
				return strings.Join(got, ","), nil
			}
		}
		return got[0], nil
	}
	idemHolder := func(ctx context.Context) (string, error) {
		names, err := r.Client.Keys(ctx, r.Prefix+"{:idem*}:lock").Result()
		if err != nil || len(names) != 1 {
			return fmt.Sprintf("key locks %q", names), err
		}
		name := strings.TrimSuffix(strings.TrimPrefix(names[0], r.Prefix+"{"), "}:lock")
		return labels(ctx, name)
	}

	e4 := echo4.New()
	h4 := func(resources ...string) echo4.HandlerFunc {
		return func(c echo4.Context) error {
			got, err := labels(c.Request().Context(), resources...)
			if err != nil {
				return err
			}
			return c.String(http.StatusOK, got)
		}
	}
	idem4 := func(c echo4.Context) error {
		got, err := idemHolder(c.Request().Context())
		if err != nil {
			return err
		}
		return c.String(http.StatusOK, got)
	}
	e4.PUT("/ided/:id", h4("/ided/:id 1"), mw4.RequestID(), fencemw4.Fence(l))
	e4.PUT("/plain/:id", h4("/plain/:id 1"), fencemw4.Fence(l))
	e4.PUT("/own/:id", h4("/own/:id 1"), fencemw4.FenceWithConfig(fencemw4.Config{Locker: l,
		Label: func(c echo4.Context) string { return c.Request().Method + " " + c.Path() }}))
	e4.PUT("/pair/:id", h4("pair:a", "pair:b"), fencemw4.FenceWithConfig(fencemw4.Config{Locker: l, Namespace: "pair",
		KeysExtractor: func(echo4.Context) ([]string, error) { return []string{"a", "b"}, nil }}))
	e4.PUT("/pay/:id", idem4, fencemw4.Idempotent(l))
	e4.PUT("/paymine/:id", idem4, fencemw4.IdempotentWithConfig(fencemw4.IdempotencyConfig{Locker: l,
		Label: func(echo4.Context) string { return "payment" }}))

	e5 := echo5.New()
	h5 := func(resources ...string) echo5.HandlerFunc {
		return func(c *echo5.Context) error {
			got, err := labels(c.Request().Context(), resources...)
			if err != nil {
				return err
			}
			return c.String(http.StatusOK, got)
		}
	}
	idem5 := func(c *echo5.Context) error {
		got, err := idemHolder(c.Request().Context())
		if err != nil {
			return err
		}
		return c.String(http.StatusOK, got)
	}
	e5.PUT("/ided/:id", h5("/ided/:id 1"), mw5.RequestID(), fencemw5.Fence(l))
	e5.PUT("/plain/:id", h5("/plain/:id 1"), fencemw5.Fence(l))
	e5.PUT("/own/:id", h5("/own/:id 1"), fencemw5.FenceWithConfig(fencemw5.Config{Locker: l,
		Label: func(c *echo5.Context) string { return c.Request().Method + " " + c.Path() }}))
	e5.PUT("/pair/:id", h5("pair:a", "pair:b"), fencemw5.FenceWithConfig(fencemw5.Config{Locker: l, Namespace: "pair",
		KeysExtractor: func(*echo5.Context) ([]string, error) { return []string{"a", "b"}, nil }}))
	e5.PUT("/pay/:id", idem5, fencemw5.Idempotent(l))
	e5.PUT("/paymine/:id", idem5, fencemw5.IdempotentWithConfig(fencemw5.IdempotencyConfig{Locker: l,
		Label: func(*echo5.Context) string { return "payment" }}))

	for _, major := range []struct {
		name string
		h    http.Handler
	}{{"v4", e4}, {"v5", e5}} {
		for i, tc := range labelCases {
			t.Run(major.name+"/"+tc.name, func(t *testing.T) {
				req := httptest.NewRequest(http.MethodPut, tc.path, nil)
				if tc.requestID != "" {
					req.Header.Set("X-Request-Id", tc.requestID)
				}
				if strings.HasPrefix(tc.path, "/pay") {
					req.Header.Set("Idempotency-Key", major.name+"-"+string(rune('a'+i)))
				}
				rec := httptest.NewRecorder()
				major.h.ServeHTTP(rec, req)
				want := tc.want(rec.Header().Get("X-Request-Id"))
				if rec.Code != http.StatusOK || rec.Body.String() != want {
					t.Errorf("got %d %q, want 200 and every lock labelled %q", rec.Code, rec.Body, want)
				}
				if tc.name == "RequestID's new ID" && want == "" {
					t.Error("RequestID set no X-Request-Id on the response")
				}
			})
		}
	}
}
