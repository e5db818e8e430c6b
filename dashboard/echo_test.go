package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	echo4 "github.com/labstack/echo/v4"
	echo5 "github.com/labstack/echo/v5"

	"github.com/fencekit/fencekit/dashboard"
	"github.com/fencekit/fencekit/fencing"
)

// TestEcho mounts the Handler in Echo v4 and v5 with echo.WrapHandler, under a group whose
// own middleware guards it (a bearer token, standing for the service's access control): a
// request without the token is refused by the middleware; with it, /admin/locks is
// redirected to /admin/locks/, and the list, the detail and force release work there.
func TestEcho(t *testing.T) {
	const token = "Bearer s3cret"
	for _, tc := range []struct {
		name  string
		mount func(h http.Handler) http.Handler
	}{
		{"v4", func(h http.Handler) http.Handler {
			e := echo4.New()
			admin := e.Group("/admin", func(next echo4.HandlerFunc) echo4.HandlerFunc {
				return func(c echo4.Context) error {
					if c.Request().Header.Get("Authorization") != token {
						return echo4.ErrUnauthorized
					}
					return next(c)
				}
			})
			page := echo4.WrapHandler(http.StripPrefix("/admin/locks", h))
			admin.Any("/locks", page) // redirected to /admin/locks/
			admin.Any("/locks/*", page)
			return e
		}},
		{"v5", func(h http.Handler) http.Handler {
			e := echo5.New()
			admin := e.Group("/admin", func(next echo5.HandlerFunc) echo5.HandlerFunc {
				return func(c *echo5.Context) error {
					if c.Request().Header.Get("Authorization") != token {
						return echo5.ErrUnauthorized
					}
					return next(c)
				}
			})
			page := echo5.WrapHandler(http.StripPrefix("/admin/locks", h))
			admin.Any("/locks", page) // redirected to /admin/locks/
			admin.Any("/locks/*", page)
			return e
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			lock := env.hold(t, "order-42", fencing.WithLabel("export-42"))
			srv := tc.mount(dashboard.New(env.locker))
			serve := func(method, path string, form url.Values, auth bool) *httptest.ResponseRecorder {
				var req *http.Request
				if form != nil {
					req = httptest.NewRequest(method, path, strings.NewReader(form.Encode()))
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				} else {
					req = httptest.NewRequest(method, path, nil)
				}
				if auth {
					req.Header.Set("Authorization", token)
				}
				rec := httptest.NewRecorder()
				srv.ServeHTTP(rec, req)
				return rec
			}
			if rec := serve("GET", "/admin/locks/", nil, false); rec.Code != http.StatusUnauthorized || strings.Contains(rec.Body.String(), "export-42") {
				t.Errorf("without the token: status %d, body %s", rec.Code, rec.Body)
			}
			form := url.Values{"resource": {"order-42"}, "token": {itoa(lock.Token())}}
			if rec := serve("POST", "/admin/locks/release", form, false); rec.Code != http.StatusUnauthorized {
				t.Errorf("release without the token: status %d", rec.Code)
			}
			if rec := serve("GET", "/admin/locks", nil, true); rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/admin/locks/" {
				t.Errorf("/admin/locks: status %d, Location %q; want 301 to /admin/locks/", rec.Code, rec.Header().Get("Location"))
			}
			if rec := serve("GET", "/admin/locks/", nil, true); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `<span class="label">export-42</span>`) {
				t.Errorf("list: status %d, body %s", rec.Code, rec.Body)
			}
			if rec := serve("GET", "/admin/locks/api/lock?resource=order-42", nil, true); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"label": "export-42"`) {
				t.Errorf("detail: status %d, body %s", rec.Code, rec.Body)
			}
			if rec := serve("POST", "/admin/locks/release", form, true); rec.Code != http.StatusSeeOther || !strings.HasPrefix(rec.Header().Get("Location"), "lock?resource=order-42&released=") {
				t.Errorf("release: status %d, Location %q, body %s", rec.Code, rec.Header().Get("Location"), rec.Body)
			}
			if _, err := lock.TTL(t.Context()); err == nil {
				t.Error("the lock is still held after the release")
			}
		})
	}
}
