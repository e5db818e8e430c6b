package asynqfence

import (
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

func mustEntry(t *testing.T, spec string, loc *time.Location) *entry {
	t.Helper()
	s := NewScheduler(nil, nil, "n", WithLocation(loc))
	id, err := s.Register(spec, asynq.NewTask("t", nil))
	if err != nil {
		t.Fatal(err)
	}
	return s.entries[id]
}

// TestEntryTicks checks the ticks an entry computes: "@every" at the multiples of its period
// since the Unix epoch, whatever the time it is asked from; cron specs in the scheduler's
// location; the latest tick at or before a time, for catch-up.
func TestEntryTicks(t *testing.T) {
	t.Parallel()
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip("no time zone data:", err)
	}
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		spec         string
		loc          *time.Location
		from         string
		next, latest string
	}{
		{"@every 30s", time.UTC, "2026-12-04T10:00:07.5Z", "2026-12-04T10:00:30Z", "2026-12-04T10:00:00Z"},
		{"@every 30s", time.UTC, "2026-12-04T10:00:30Z", "2026-12-04T10:01:00Z", "2026-12-04T10:00:30Z"},
		{"@every 1h", paris, "2026-12-04T10:20:00Z", "2026-12-04T11:00:00Z", "2026-12-04T10:00:00Z"},
		{"@every 1500ms", time.UTC, "2026-12-04T10:00:00.2Z", "2026-12-04T10:00:01Z", "2026-12-04T10:00:00Z"}, // rounded to 1s, as robfig/cron does
		{"0 9 * * *", time.UTC, "2026-12-04T10:00:00Z", "2026-12-05T09:00:00Z", "2026-12-04T09:00:00Z"},
		{"0 9 * * *", paris, "2026-12-04T10:00:00Z", "2026-12-05T08:00:00Z", "2026-12-04T08:00:00Z"}, // 9:00 in Paris is 8:00 UTC in winter
		{"CRON_TZ=America/New_York 0 9 * * *", paris, "2026-12-04T10:00:00Z", "2026-12-04T14:00:00Z", "2026-12-03T14:00:00Z"},
		{"@yearly", time.UTC, "2026-12-04T10:00:00Z", "2027-01-01T00:00:00Z", "2026-01-01T00:00:00Z"},
	} {
		t.Run(tc.spec+"/"+tc.from, func(t *testing.T) {
			e := mustEntry(t, tc.spec, tc.loc)
			from := at(tc.from)
			if got := e.next(from); !got.Equal(at(tc.next)) {
				t.Errorf("next after %v: got %v, want %v", from, got.UTC(), tc.next)
			}
			got, ok := e.latest(from)
			if !ok || !got.Equal(at(tc.latest)) {
				t.Errorf("latest at or before %v: got %v, %v; want %v", from, got.UTC(), ok, tc.latest)
			}
		})
	}
}
