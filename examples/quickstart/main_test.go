package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	rdb, _ := testRedis(t)
	var out bytes.Buffer
	if err := run(t.Context(), rdb, &out); err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`^holding order-42 with fencing token ([1-9][0-9]*)\norder-42 is "paid", last written with token ([1-9][0-9]*)\n$`)
	m := want.FindStringSubmatch(out.String())
	if m == nil || m[1] != m[2] {
		t.Fatalf("unexpected output:\n%s", out.String())
	}
}

// TestLeavesNothingBehind runs the program on a database of its own of the real Redis named
// by FENCING_REDIS_ADDR and checks that no key is left.
func TestLeavesNothingBehind(t *testing.T) {
	rdb, _ := dedicated(t, 14)
	if err := run(t.Context(), rdb, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
}

// TestREADMEShowsThisProgram checks that the README's Quick start is this program, byte
// for byte, so that the README's code is compiled and tested.
func TestREADMEShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	program, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Quick start\n")
	if !ok {
		t.Fatal(`README.md has no "## Quick start" section`)
	}
	_, code, ok := strings.Cut(section, "```go\n")
	if !ok {
		t.Fatal("the Quick start has no ```go block")
	}
	code, _, ok = strings.Cut(code, "```\n")
	if !ok {
		t.Fatal("the Quick start's ```go block does not end")
	}
	if code != string(program) {
		t.Errorf("the README's Quick start differs from examples/quickstart/main.go; copy the file into the README")
	}
}
