package fencekit_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/fencekit/fencekit"
	"github.com/fencekit/fencekit/tracing"
)

// TestVersion checks that Version is semantic, that the tracing package reports the same
// version and that CHANGELOG.md has a dated section for it below an Unreleased one.
func TestVersion(t *testing.T) {
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(fencekit.Version) {
		t.Errorf("Version = %q, want X.Y.Z", fencekit.Version)
	}
	if tracing.Version != fencekit.Version {
		t.Errorf("tracing.Version = %q, want fencekit.Version %q", tracing.Version, fencekit.Version)
	}
	changelog, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	// Released: the version's section is dated, and an Unreleased section stays above it.
	section := regexp.MustCompile(`(?m)^## \[` + regexp.QuoteMeta(fencekit.Version) + `\] - \d{4}-\d{2}-\d{2}$`)
	if !section.Match(changelog) {
		t.Fatalf("CHANGELOG.md has no section \"## [%s] - YYYY-MM-DD\"", fencekit.Version)
	}
	if u := strings.Index(string(changelog), "## [Unreleased]"); u < 0 || u > section.FindIndex(changelog)[0] {
		t.Errorf("CHANGELOG.md has no \"## [Unreleased]\" section above %s's", fencekit.Version)
	}
}
