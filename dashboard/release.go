package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/fencekit/fencekit/fencing"
)

// maxForm bounds the body of a force release: a resource name, a token.
const maxForm = 64 << 10

// releaseResult is the JSON answer of a force release.
type releaseResult struct {
	Resource string `json:"resource"`
	Token    int64  `json:"token"`
	Released bool   `json:"released"`
}

// release force-releases the holder of a resource with a token, from a POST form with
// fields resource and token: [fencing.Locker.ForceRelease]. The page's form is answered 303
// See Other to the resource's page; api, with JSON. Refused: another method (405), a
// read-only Handler (403), a request from another site's page (403); a holder that is gone
// is answered 409 Conflict, and nothing is released.
func (h *Handler) release(w http.ResponseWriter, r *http.Request, api bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		h.fail(w, r, http.StatusMethodNotAllowed, errors.New("dashboard: force release takes a POST"))
		return
	}
	if h.cfg.readOnly {
		h.fail(w, r, http.StatusForbidden, errors.New("dashboard: force release is turned off (read-only)"))
		return
	}
	if err := h.origin.Check(r); err != nil {
		h.fail(w, r, http.StatusForbidden, fmt.Errorf("dashboard: force release refused: %w", err))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("dashboard: force release: %w", err))
		return
	}
	name, ok := h.resource(w, r, r.PostForm)
	if !ok {
		return
	}
	token, err := strconv.ParseInt(r.PostForm.Get("token"), 10, 64)
	if err != nil || token <= 0 {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("dashboard: force release: token %q is not a positive integer", r.PostForm.Get("token")))
		return
	}
	switch err := h.locker.ForceRelease(r.Context(), name, token); {
	case errors.Is(err, fencing.ErrNotHeld):
		h.fail(w, r, http.StatusConflict, fmt.Errorf("dashboard: nothing released: no holder of %s has token %d any more (released, expired or replaced meanwhile)", displayName(name), token))
		return
	case err != nil:
		h.failLocker(w, r, err)
		return
	}
	if api {
		writeJSON(w, http.StatusOK, releaseResult{Resource: name, Token: token, Released: true})
		return
	}
	// Relative to the release's own URL, beside the resource's page; set by hand, as
	// http.Redirect would resolve it against the path left by http.StripPrefix.
	w.Header().Set("Location", detailURL(name)+"&released="+strconv.FormatInt(token, 10))
	w.WriteHeader(http.StatusSeeOther)
}
