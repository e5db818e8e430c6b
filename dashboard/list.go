package dashboard

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/fencekit/fencekit/internal/scan"
)

// listPage is the list's data: its HTML page and, without page, its JSON form.
type listPage struct {
	page `json:"-"`
	// Locks are the locks of this page, by name.
	Locks []lockView `json:"locks"`
	// Match is the glob the names were filtered with (the query's "match"; "*" for all).
	Match string `json:"match"`
	// Next is the cursor of the next page, "" after the last.
	Next string `json:"next"`
	// Skipped are the resources that Redis could not read (a key of an unexpected type).
	Skipped []skipped `json:"skipped"`
	// Cursor is this page's cursor, "" for the first. NextURL and FirstURL are the links
	// to the next page and the first.
	Cursor   string `json:"-"`
	NextURL  string `json:"-"`
	FirstURL string `json:"-"`
	// APIURL is the link to this page's JSON form.
	APIURL string `json:"-"`
}

type skipped struct {
	Resource string `json:"resource"`
	Error    string `json:"error"`
}

// list answers the list, as a page or, for api, as JSON. Its query: cursor, the page to
// read (Next of the page before; none for the first), and match, a glob the names must
// match besides the Handler's own (WithMatch).
func (h *Handler) list(w http.ResponseWriter, r *http.Request, api bool) {
	q := r.URL.Query()
	match, cursor := q.Get("match"), q.Get("cursor")
	if match == "" {
		match = "*"
	}
	client := h.locker.Client()
	prefix := h.locker.Settings().Prefix
	pg, err := scan.ReadPage(r.Context(), client, prefix, cursor, h.cfg.pageSize, h.cfg.match, match)
	switch {
	case errors.Is(err, scan.ErrCursor):
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("dashboard: invalid cursor %q: start from the first page", cursor))
		return
	case errors.Is(err, scan.ErrServersChanged):
		h.fail(w, r, http.StatusConflict, errors.New("dashboard: the Redis servers changed since this page's cursor was made (a failover or a resharding): start from the first page"))
		return
	case err != nil:
		h.fail(w, r, http.StatusServiceUnavailable, fmt.Errorf("dashboard: list: %w", err))
		return
	}
	names := pg.Names
	out := listPage{Locks: []lockView{}, Skipped: []skipped{}, Match: match, Next: pg.Next, Cursor: cursor}
	statuses, errs := scan.Inspect(r.Context(), h.locker, names)
	for i, st := range statuses {
		switch err := errs[i]; {
		case err != nil && scan.OneResource(err):
			out.Skipped = append(out.Skipped, skipped{Resource: names[i], Error: err.Error()})
		case err != nil:
			h.fail(w, r, http.StatusServiceUnavailable, err)
			return
		case !scan.Empty(st):
			out.Locks = append(out.Locks, viewOf(st))
		}
	}
	slices.SortFunc(out.Locks, func(a, b lockView) int { return cmp.Compare(a.Resource, b.Resource) })
	if api {
		writeJSON(w, http.StatusOK, out)
		return
	}
	out.page = h.page("Locks", h.cfg.refresh)
	out.FirstURL = listURL(match, "")
	out.APIURL = "api/locks" + strings.TrimPrefix(listURL(match, cursor), "./")
	if pg.Next != "" {
		out.NextURL = listURL(match, pg.Next)
	}
	h.render(w, http.StatusOK, "list", out)
}

// listURL returns the relative link to the list's page at cursor, filtered with match.
func listURL(match, cursor string) string {
	q := url.Values{}
	if match != "*" {
		q.Set("match", match)
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if len(q) == 0 {
		return "./"
	}
	return "./?" + q.Encode()
}
