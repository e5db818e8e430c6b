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
// version and that CHANGELOG.md has a section for it (or the Unreleased one before a tag).
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
	if !strings.Contains(string(changelog), "## [Unreleased]") &&
		!strings.Contains(string(changelog), "## ["+fencekit.Version+"]") {
		t.Errorf("CHANGELOG.md has neither an Unreleased section nor one for %s", fencekit.Version)
	}
}
