package dashboard

import (
	"fmt"
	"net/http"
	"time"
)

// Defaults of the options.
const (
	// DefaultPageSize is how many locks a page of the list aims at (WithPageSize).
	DefaultPageSize = 50
	// DefaultRefresh is how often the pages read Redis again on their own (WithRefresh).
	DefaultRefresh = 2 * time.Second
	// DefaultTitle is the title of the pages (WithTitle).
	DefaultTitle = "fencekit locks"
	// MaxPageSize is the largest page WithPageSize accepts.
	MaxPageSize = 1000
	// MinRefresh is the shortest interval WithRefresh accepts, other than 0.
	MinRefresh = 100 * time.Millisecond
)

// An Option configures a Handler made by [New].
type Option func(*config)

type config struct {
	pageSize int
	refresh  time.Duration
	title    string
	match    string
	readOnly bool
	origins  []string
	err      error // the first invalid option's
}

func defaultConfig() config {
	return config{pageSize: DefaultPageSize, refresh: DefaultRefresh, title: DefaultTitle, match: "*"}
}

// invalid records the first invalid option.
func (c *config) invalid(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("dashboard: "+format, args...)
	}
}

// WithPageSize sets how many locks a page of the list aims at, from 1 to [MaxPageSize]. A
// page is read with SCAN, which returns keys in batches, so it holds n locks or a few more
// (see the package documentation). Default: [DefaultPageSize].
func WithPageSize(n int) Option {
	return func(c *config) {
		if n < 1 || n > MaxPageSize {
			c.invalid("page size %d is not in [1, %d]", n, MaxPageSize)
			return
		}
		c.pageSize = n
	}
}

// WithRefresh sets how often the list and the detail page read Redis again on their own,
// in the browser, without reloading the page; 0 turns it off. Another value below
// [MinRefresh] is invalid. Default: [DefaultRefresh].
func WithRefresh(d time.Duration) Option {
	return func(c *config) {
		if d != 0 && d < MinRefresh {
			c.invalid("refresh interval %v is below %v", d, MinRefresh)
			return
		}
		c.refresh = d
	}
}

// WithTitle sets the title of the pages, such as the service's name. Default:
// [DefaultTitle].
func WithTitle(title string) Option {
	return func(c *config) {
		if title == "" {
			c.invalid("empty title")
			return
		}
		c.title = title
	}
}

// WithMatch limits the Handler to the resources whose names match glob, with the rules of
// Redis's MATCH ('*' any run of bytes, '/' included; '?' one byte; [abc] a class; '\'
// escapes): the list shows no other, and their detail and force release answer 404 Not
// Found. It applies to the decoded names, so it matches names with braces too. Default:
// "*", every resource under the Locker's prefix.
func WithMatch(glob string) Option {
	return func(c *config) {
		if glob == "" {
			c.invalid("empty match")
			return
		}
		c.match = glob
	}
}

// ReadOnly hides force release: the pages show no button and a POST to release answers 403
// Forbidden. Default: force release is offered.
func ReadOnly() Option {
	return func(c *config) { c.readOnly = true }
}

// WithTrustedOrigins lets force release be posted from pages of these origins
// ("https://ops.example.com": scheme, host and port only), besides the Handler's own. A
// browser's request from any other origin is refused with 403 Forbidden
// ([http.CrossOriginProtection]). An origin of another form is invalid. Default: none.
func WithTrustedOrigins(origins ...string) Option {
	return func(c *config) {
		p := http.NewCrossOriginProtection()
		for _, o := range origins {
			if err := p.AddTrustedOrigin(o); err != nil {
				c.invalid("trusted origin: %v", err)
				return
			}
		}
		c.origins = append(c.origins, origins...)
	}
}
