package tracing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// events returns the names of a span's events.
func events(s sdktrace.ReadOnlySpan) []string {
	var names []string
	for _, e := range s.Events() {
		names = append(names, e.Name)
	}
	return names
}

// TestLeadSpansAndGauge leads a name for two terms, the first lost (its lock deleted), the
// second resigned: a fencing.campaign span per campaign, with the event fencing.leader.won,
// a fencing.lead span per term, ended with fencing.leader.lost or fencing.leader.resigned,
// and the fencing.leader gauge at 1 during each term and 0 after.
func TestLeadSpansAndGauge(t *testing.T) {
	r := redistest.New(t)
	tel := newTelemetry(t)
	l := newLocker(t, r, tel.hooks(), fencing.WithTTL(3*time.Second)) // the loss is found a second in
	ctx, parent := tel.parent(t.Context(), "service")
	terms := 0
	var gauge []int64
	err := l.Lead(ctx, "leader", func(ctx context.Context) error {
		terms++
		gauge = append(gauge, sums(t, tel, "fencing.leader")[`fencing.resource=leader`])
		if terms == 1 {
			r.Client.Del(context.Background(), r.Prefix+"{leader}:lock")
			<-ctx.Done()
			return context.Cause(ctx)
		}
		return nil // resign
	})
	parent.End()
	if err != nil || terms != 2 {
		t.Fatalf("Lead: got %v after %d terms, want nil after 2", err, terms)
	}
	if gauge[0] != 1 || gauge[1] != 1 {
		t.Errorf("fencing.leader during the terms: got %v, want 1 and 1", gauge)
	}
	if got := sums(t, tel, "fencing.leader")[`fencing.resource=leader`]; got != 0 {
		t.Errorf("fencing.leader after Lead: got %d, want 0", got)
	}

	campaigns, leads := tel.ended("fencing.campaign"), tel.ended("fencing.lead")
	if len(campaigns) != 2 || len(leads) != 2 {
		t.Fatalf("got %d campaign and %d lead spans, want 2 and 2 (all: %v)", len(campaigns), len(leads), spanNames(tel.spans.Ended()))
	}
	for i, c := range campaigns {
		wantParent(t, c, parent.SpanContext())
		wantAttrs(t, c, map[attribute.Key]any{"fencing.operation": "campaign", "fencing.outcome": "acquired", "fencing.token": int64(i + 1), "fencing.resource": "leader"})
		wantStatus(t, c, codes.Unset)
		if got := events(c); len(got) != 1 || got[0] != "fencing.leader.won" {
			t.Errorf("campaign %d events: got %v, want fencing.leader.won", i, got)
		}
		// The acquisition is inside the campaign.
		for _, a := range tel.ended("fencing.acquire") {
			if a.Parent().SpanID() == c.SpanContext().SpanID() {
				goto found
			}
		}
		t.Errorf("campaign %d has no fencing.acquire span inside it", i)
	found:
	}
	wantParent(t, leads[0], parent.SpanContext())
	wantAttrs(t, leads[0], map[attribute.Key]any{"fencing.operation": "lead", "fencing.outcome": "not_held", "fencing.lost": true, "fencing.token": int64(1)})
	wantStatus(t, leads[0], codes.Unset)
	if got := events(leads[0]); len(got) != 1 || got[0] != "fencing.leader.lost" {
		t.Errorf("lost term's events: got %v, want fencing.leader.lost", got)
	}
	wantAttrs(t, leads[1], map[attribute.Key]any{"fencing.outcome": "resigned", "fencing.token": int64(2)})
	if got := events(leads[1]); len(got) != 1 || got[0] != "fencing.leader.resigned" {
		t.Errorf("resigned term's events: got %v, want fencing.leader.resigned", got)
	}
	// The term's renewals and release are inside its span.
	for _, s := range tel.ended("fencing.release") {
		if s.Parent().SpanID() != leads[0].SpanContext().SpanID() && s.Parent().SpanID() != leads[1].SpanContext().SpanID() {
			t.Errorf("a release outside the terms, parent %v", s.Parent().SpanID())
		}
	}
}

// TestLeadFailedTermSpan: fn fails while leading, and the term's span has status Error.
func TestLeadFailedTermSpan(t *testing.T) {
	r := redistest.New(t)
	tel := newTelemetry(t)
	l := newLocker(t, r, tel.hooks())
	boom := errors.New("boom")
	if err := l.Lead(t.Context(), "leader", func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Lead: got %v", err)
	}
	s := tel.only(t, "fencing.lead")
	wantAttrs(t, s, map[attribute.Key]any{"fencing.outcome": "error", "error.type": "work"})
	wantStatus(t, s, codes.Error)
}
