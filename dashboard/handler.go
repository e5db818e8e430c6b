package dashboard

import (
	"errors"
	"html/template"
	"net/http"
	"strings"

	"github.com/fencekit/fencekit/fencing"
)

// A Handler serves the operators' page of the locks of one [fencing.Locker]: the list, one
// resource's detail, force release, their JSON forms, and the page's stylesheet and script.
// It is safe for concurrent use. Its routes are relative to where it is mounted (see the
// package documentation): mount it with [http.StripPrefix] under a path that ends in "/".
type Handler struct {
	locker *fencing.Locker
	cfg    config
	pages  map[string]*template.Template
	origin *http.CrossOriginProtection
	err    error
}

// New returns a Handler of the locks that locker keeps: every resource under its prefix
// (fencing.WithPrefix), found with SCAN on its client (on every primary of a
// *redis.ClusterClient, on every shard of a *redis.Ring), read with [fencing.Locker.Inspect]
// and released with [fencing.Locker.ForceRelease]. The Handler only reads, except force
// release, which is POST only, refused from other sites' pages, and hidden by [ReadOnly]. It
// has no access control of its own: guard it with the service's own middleware.
//
// New does not talk to Redis and never fails: an invalid option or a nil Locker makes every
// request answer 500 Internal Server Error with the error, which [Handler.Err] also
// returns.
func New(locker *fencing.Locker, opts ...Option) *Handler {
	h := &Handler{locker: locker, cfg: defaultConfig(), origin: http.NewCrossOriginProtection()}
	for _, o := range opts {
		if o != nil {
			o(&h.cfg)
		}
	}
	for _, o := range h.cfg.origins {
		_ = h.origin.AddTrustedOrigin(o) // checked by WithTrustedOrigins
	}
	var err error
	h.pages, err = parsePages()
	switch {
	case h.cfg.err != nil:
		h.err = h.cfg.err
	case locker == nil || locker.Client() == nil:
		h.err = errors.New("dashboard: nil Locker")
	case err != nil:
		h.err = err
	}
	return h
}

// Err returns the error that every request answers with: an invalid option or a nil Locker
// given to [New]; nil otherwise.
func (h *Handler) Err() error { return h.err }

// ServeHTTP answers a request to the page; see the package documentation for its routes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	path := r.URL.Path
	if path == "" && r.Method != http.MethodPost {
		h.toSlash(w, r)
		return
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path // under http.StripPrefix of a path ending in "/"
	}
	if h.err != nil {
		h.fail(w, r, http.StatusInternalServerError, h.err)
		return
	}
	switch path {
	case "/", "/lock", "/api/locks", "/api/lock", "/style.css", "/refresh.js":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			h.fail(w, r, http.StatusMethodNotAllowed, errors.New("dashboard: method "+r.Method+" not allowed; use GET"))
			return
		}
		switch path {
		case "/style.css", "/refresh.js":
			h.asset(w, r, path[1:])
		case "/":
			h.list(w, r, false)
		case "/api/locks":
			h.list(w, r, true)
		case "/lock":
			h.detail(w, r, false)
		default:
			h.detail(w, r, true)
		}
	case "/release", "/api/release":
		h.release(w, r, path == "/api/release")
	default:
		h.fail(w, r, http.StatusNotFound, errors.New("dashboard: no page "+path))
	}
}

// toSlash redirects a request for the mount point without its trailing slash (a Handler
// under http.StripPrefix("/admin/locks", ...) asked for "/admin/locks") to the list, so
// that the pages' relative links resolve under the mount point.
func (h *Handler) toSlash(w http.ResponseWriter, r *http.Request) {
	target, _, _ := strings.Cut(r.RequestURI, "?")
	if !strings.HasPrefix(target, "/") || strings.HasPrefix(target, "//") || strings.HasSuffix(target, "/") {
		h.fail(w, r, http.StatusNotFound, errors.New("dashboard: no page; ask for the list with a trailing slash"))
		return
	}
	target += "/"
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	// Set by hand: http.Redirect would resolve a relative target against the stripped path.
	w.Header().Set("Location", target)
	w.WriteHeader(http.StatusMovedPermanently)
}

// api reports whether r asks for a JSON form: its path is under "api/".
func api(r *http.Request) bool {
	return strings.HasPrefix(strings.TrimPrefix(r.URL.Path, "/"), "api/")
}
