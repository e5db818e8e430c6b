package dashboard

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"time"
)

// assets are the templates of the pages, their stylesheet and their script: no build step,
// nothing fetched from elsewhere.
//
//go:embed templates/*.html static/style.css static/refresh.js
var assets embed.FS

// parsePages parses each page with the layout.
func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"display":  displayName,
		"mode":     modeText,
		"duration": duration,
		"lease":    lease,
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"list", "detail", "error"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: templates: %w", err)
		}
		pages[name] = t
	}
	return pages, nil
}

// page is what every page's layout shows.
type page struct {
	Title     string // the Handler's
	PageTitle string // the page's
	// RefreshMs is how often the page reads Redis again, 0 for never; Refresh is the same
	// in seconds, rounded up, for the <meta http-equiv="refresh"> of a browser without
	// scripts.
	RefreshMs int64
	Refresh   int64
	ReadOnly  bool
	ReadAt    string
}

// page returns the layout's data of a page titled title that refreshes every refresh.
func (h *Handler) page(title string, refresh time.Duration) page {
	return page{
		Title: h.cfg.title, PageTitle: title, ReadOnly: h.cfg.readOnly,
		RefreshMs: refresh.Milliseconds(), Refresh: int64((refresh + time.Second - 1) / time.Second),
		ReadAt: time.Now().UTC().Format("15:04:05 UTC"),
	}
}

// errorPage is the data of the error page.
type errorPage struct {
	page
	Code    int
	Status  string
	Message string
}

// render answers the page name with data and status code. The page is rendered before
// anything is written, so that a template error is answered 500 rather than half a page.
func (h *Handler) render(w http.ResponseWriter, code int, name string, data any) {
	var buf bytes.Buffer
	if err := h.pages[name].Execute(&buf, data); err != nil {
		http.Error(w, "dashboard: render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	// The page's own stylesheet and script, nothing inline, no framing: a page with a force
	// release button must not be framed by another site (clickjacking).
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	w.WriteHeader(code)
	_, _ = buf.WriteTo(w)
}

// asset answers the static file name: the stylesheet or the script.
func (h *Handler) asset(w http.ResponseWriter, r *http.Request, name string) {
	b, err := assets.ReadFile("static/" + name)
	if err != nil {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("dashboard: no file %s", name))
		return
	}
	ct := "text/css; charset=utf-8"
	if name == "refresh.js" {
		ct = "text/javascript; charset=utf-8"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
}
