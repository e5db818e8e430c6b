package errorstest

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/dashboard"
	"github.com/fencekit/fencekit/fencing"
)

const dashPrefix = "dashboard: "

// answer sends a request to h, which must answer status, and returns the error of its JSON
// answer, {"error": "..."}, as an error of that text: the text the dashboard shows.
func answer(t *testing.T, h http.Handler, method, target string, form url.Values, status int) error {
	t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req := httptest.NewRequestWithContext(t.Context(), method, target, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var got struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("%s %s: got %d %q, want JSON", method, target, rec.Code, rec.Body)
	}
	if rec.Code != status {
		t.Errorf("%s %s: got status %d, want %d", method, target, rec.Code, status)
	}
	if got.Error == "" {
		t.Fatalf("%s %s: got %d %q, want an error", method, target, rec.Code, rec.Body)
	}
	return errors.New(got.Error)
}

// dashboardCases are the errors the dashboard returns (Handler.Err) and shows (the texts of
// its JSON answers, which no errors.Is can match).
func dashboardCases() []errCase {
	return []errCase{
		{"dashboard.Handler.Err/option", dashPrefix, nil, func(t *testing.T) error {
			return dashboard.New(newEnv(t).locker, dashboard.WithPageSize(0)).Err()
		}},
		{"dashboard.Handler.Err/nil-locker", dashPrefix, nil, func(t *testing.T) error {
			return dashboard.New(nil).Err()
		}},
		{"dashboard.Handler/ErrInvalid", core, nil, func(t *testing.T) error {
			// Inspect's refusal of the name, as it is.
			return answer(t, dashboard.New(newEnv(t).locker), http.MethodGet, "/api/lock?resource=", nil, http.StatusBadRequest)
		}},
		{"dashboard.Handler/ErrNotHeld", dashPrefix, nil, func(t *testing.T) error {
			// A force release of a holder that is gone.
			e := newEnv(t)
			k := e.hold(t, "r")
			form := url.Values{"resource": {"r"}, "token": {strconv.FormatInt(k.Token()+1, 10)}}
			return answer(t, dashboard.New(e.locker), http.MethodPost, "/api/release", form, http.StatusConflict)
		}},
		{"dashboard.Handler/redis", core, nil, func(t *testing.T) error {
			// Redis fails: Inspect's error, as it is.
			e := newEnv(t)
			c := e.r.NewClient(t)
			l := fencing.New(c, fencing.WithPrefix(e.r.Prefix))
			defer l.Close()
			_ = c.Close()
			return answer(t, dashboard.New(l), http.MethodGet, "/api/lock?resource=r", nil, http.StatusServiceUnavailable)
		}},
		{"dashboard.Handler/redis/list", dashPrefix, nil, func(t *testing.T) error {
			e := newEnv(t)
			c := e.r.NewClient(t)
			l := fencing.New(c, fencing.WithPrefix(e.r.Prefix))
			defer l.Close()
			_ = c.Close()
			return answer(t, dashboard.New(l), http.MethodGet, "/api/locks", nil, http.StatusServiceUnavailable)
		}},
		{"dashboard.Handler/no-resource", dashPrefix, nil, func(t *testing.T) error {
			return answer(t, dashboard.New(newEnv(t).locker), http.MethodGet, "/api/lock", nil, http.StatusBadRequest)
		}},
		{"dashboard.Handler/cursor", dashPrefix, nil, func(t *testing.T) error {
			return answer(t, dashboard.New(newEnv(t).locker), http.MethodGet, "/api/locks?cursor=nonsense", nil, http.StatusBadRequest)
		}},
		{"dashboard.Handler/read-only", dashPrefix, nil, func(t *testing.T) error {
			form := url.Values{"resource": {"r"}, "token": {"1"}}
			return answer(t, dashboard.New(newEnv(t).locker, dashboard.ReadOnly()), http.MethodPost, "/api/release", form, http.StatusForbidden)
		}},
		{"dashboard.Handler/invalid-option", dashPrefix, nil, func(t *testing.T) error {
			return answer(t, dashboard.New(newEnv(t).locker, dashboard.WithPageSize(0)), http.MethodGet, "/api/locks", nil, http.StatusInternalServerError)
		}},
	}
}

func TestDashboard(t *testing.T) {
	t.Parallel()
	run(t, dashboardCases())
}
