package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/scan"
)

// detailPage is the data of a resource's page.
type detailPage struct {
	page
	lockView
	// Released is the token of the holder just force-released from this page, 0 if none.
	Released int64
	// URL is the page's own relative link.
	URL string
}

// detail answers one resource's detail, as a page or, for api, as JSON. Its query:
// resource, the name.
func (h *Handler) detail(w http.ResponseWriter, r *http.Request, api bool) {
	q := r.URL.Query()
	name, ok := h.resource(w, r, q)
	if !ok {
		return
	}
	st, err := h.locker.Inspect(r.Context(), name)
	if err != nil {
		h.failLocker(w, r, err)
		return
	}
	v := viewOf(st)
	if api {
		writeJSON(w, http.StatusOK, v)
		return
	}
	d := detailPage{page: h.page(displayName(name), h.cfg.refresh), lockView: v, URL: detailURL(name)}
	if n, err := strconv.ParseInt(q.Get("released"), 10, 64); err == nil && n > 0 {
		d.Released = n
	}
	h.render(w, http.StatusOK, "detail", d)
}

// resource returns the resource the query q names. When it names none, or one that
// WithMatch excludes, it answers the request and returns false.
func (h *Handler) resource(w http.ResponseWriter, r *http.Request, q url.Values) (string, bool) {
	if !q.Has("resource") {
		h.fail(w, r, http.StatusBadRequest, errors.New("dashboard: no resource given: ask for ?resource=NAME"))
		return "", false
	}
	name := q.Get("resource")
	if !scan.Match(h.cfg.match, name) {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("dashboard: resource %q is not shown here", name))
		return "", false
	}
	return name, true
}

// failLocker answers err, an error of the Locker's, which names its operation and
// resource: 400 Bad Request for a name it refuses
// (fencing.ErrInvalid), 503 Service Unavailable for Redis failing.
func (h *Handler) failLocker(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, fencing.ErrInvalid) {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	h.fail(w, r, http.StatusServiceUnavailable, err)
}

// detailURL returns the relative link to the page of resource name.
func detailURL(name string) string {
	return "lock?" + url.Values{"resource": {name}}.Encode()
}
