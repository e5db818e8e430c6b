package main

import (
	"bytes"
	"regexp"
	"testing"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), "", &out); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`acquired "order-42" with fencing token [1-9][0-9]*\nreleased\n`).Match(out.Bytes()) {
		t.Fatalf("unexpected output:\n%s", out.String())
	}
}
