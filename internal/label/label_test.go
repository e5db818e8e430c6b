package label

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

func TestFit(t *testing.T) {
	long := "asynqfence:nightly-settlement:0123456789abcdef0123456789abcdef:1767225600"
	tests := []struct {
		name, id, want string
	}{
		{"empty", "", ""},
		{"uuid", "0e1a4c2f-7a51-4a3c-9f5e-8a7c1d2b3e4f", "0e1a4c2f-7a51-4a3c-9f5e-8a7c1d2b3e4f"},
		{"at the limit", strings.Repeat("a", fencing.MaxLabelLen), strings.Repeat("a", fencing.MaxLabelLen)},
		{"one byte over", strings.Repeat("a", fencing.MaxLabelLen+1), strings.Repeat("a", 30) + Elision + strings.Repeat("a", 31)},
		{"scheduler task", long, long[:30] + Elision + long[len(long)-31:]},
		{"control characters", "req\n1\x7f", "req?1?"},
		{"not UTF-8", "a\xffb", "a?b"},
		// 'é' is two bytes: the start ends before the one cut in two, the end starts after it.
		{"characters cut", strings.Repeat("é", 40), strings.Repeat("é", 15) + Elision + strings.Repeat("é", 15)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Fit(tt.id)
			if got != tt.want {
				t.Errorf("Fit(%q) = %q, want %q", tt.id, got, tt.want)
			}
			if len(got) > fencing.MaxLabelLen || !utf8.ValidString(got) {
				t.Errorf("Fit(%q) = %q: %d bytes, valid UTF-8 %v; want a label", tt.id, got, len(got), utf8.ValidString(got))
			}
		})
	}
}

// TestFitAccepted checks that the core takes every label Fit returns, and shows it in Inspect.
func TestFitAccepted(t *testing.T) {
	r := redistest.New(t)
	l := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	t.Cleanup(func() { _ = l.Close() })
	for _, id := range []string{"req-1", strings.Repeat("x", 200), "a\x00b\xfe" + strings.Repeat("ü", 60)} {
		want := Fit(id)
		err := l.Do(t.Context(), "r", func(ctx context.Context) error {
			st, err := l.Inspect(ctx, "r")
			if err != nil {
				return err
			}
			if len(st.Holders) != 1 || st.Holders[0].Label != want {
				t.Errorf("id %q: got holders %+v, want one labelled %q", id, st.Holders, want)
			}
			return nil
		}, fencing.WithLabel(want))
		if err != nil {
			t.Fatalf("id %q: Do with label %q: %v", id, want, err)
		}
	}
}
