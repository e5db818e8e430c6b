package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
)

// itoa formats a token.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// newRecorder serves GET path with h and returns the answer.
func newRecorder(h http.Handler, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}
