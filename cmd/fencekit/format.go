package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// newTable returns a tabwriter for a table on w; the caller flushes it.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// displayName returns a resource name for a table: as it is when every character is
// printable and it has no leading or trailing space, else quoted as a Go string.
func displayName(s string) string {
	if s == "" || strings.TrimSpace(s) != s {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// labelText formats a label at the end of a line: ", label L", or nothing without one.
func labelText(label string) string {
	if label == "" {
		return ""
	}
	return ", label " + displayName(label)
}

// labelCell formats a label for a table: "-" without one.
func labelCell(label string) string {
	if label == "" {
		return "-"
	}
	return displayName(label)
}

// labelsCell formats the labels of a resource's waiters for a table: those it has, in queue
// order, the first three and a count of the others; "-" when none has one.
func labelsCell(labels []string) string {
	var shown []string
	more := 0
	for _, l := range labels {
		switch {
		case l == "":
		case len(shown) < 3:
			shown = append(shown, displayName(l))
		default:
			more++
		}
	}
	if len(shown) == 0 {
		return "-"
	}
	s := strings.Join(shown, ", ")
	if more > 0 {
		s += fmt.Sprintf(" +%d", more)
	}
	return s
}

// ttl formats a remaining time in milliseconds: -1 (no expiry) as "never", -2 (no key, no
// holder) as "-".
func (c *cli) ttl(ms int64) string {
	switch {
	case ms == -1:
		return "never"
	case ms < 0:
		return "-"
	}
	return c.age(ms)
}

// age formats a time read from Redis in milliseconds, a lease left or a wait, rounded to
// c.grain when it is set.
func (c *cli) age(ms int64) string {
	d := msDuration(ms)
	if c.grain > 0 {
		d = d.Round(c.grain)
	}
	return duration(d)
}

// duration formats d compactly: "450ms", "29.8s", "12m34s", "10m", "1h30m".
func duration(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
	case d < time.Second:
		d = d.Round(time.Millisecond)
	case d < time.Minute:
		d = d.Round(100 * time.Millisecond)
	default:
		d = d.Round(time.Second)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// byteSize formats a size: "512 B", "1.5 KiB", "12.3 MiB".
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// yesNo formats a bool for a table.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// plural formats a count of things: "1 holder", "2 holders".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}
