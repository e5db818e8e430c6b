package main

import (
	"io"
	"slices"
	"strings"
	"testing"
)

// TestUsage covers help, usage errors and their exit codes; it needs no Redis.
func TestUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string // substring
		stderr string // substring
	}{
		{name: "help", args: []string{"--help"}, code: exitOK, stdout: "Exit codes:\n  0  success"},
		{name: "help-cmd", args: []string{"help", "stats"}, code: exitOK, stdout: "Usage: fencekit stats"},
		{name: "no-args", args: nil, code: exitUsage, stderr: "Commands:"},
		{name: "unknown", args: []string{"lock"}, code: exitUsage, stderr: `unknown command "lock"`},
		{name: "bad-flag", args: []string{"locks", "--nope"}, code: exitUsage, stderr: "flag provided but not defined: -nope"},
		{name: "show-no-resource", args: []string{"show"}, code: exitUsage, stderr: "want one RESOURCE"},
		{name: "locks-extra", args: []string{"locks", "x"}, code: exitUsage, stderr: `unexpected argument "x"`},
		{name: "brace-prefix", args: []string{"locks", "--prefix", "a{b}:"}, code: exitUsage, stderr: "contains '{' or '}'"},
		{name: "bad-url", args: []string{"stats", "-u", "http://x"}, code: exitUsage, stderr: "-u: "},
		{name: "flags-first", args: []string{"--prefix", "locks", "-u", "redis://127.0.0.1:1", "--json", "stats", "extra"}, code: exitUsage, stderr: `fencekit stats: unexpected argument "extra"`},
		{name: "release-no-force", args: []string{"release", "x"}, code: exitUsage, stderr: "needs --force"},
	}
	for _, cmd := range commands {
		tests = append(tests, struct {
			name   string
			args   []string
			code   int
			stdout string
			stderr string
		}{name: cmd.name + "-help", args: []string{cmd.name, "--help"}, code: exitOK, stdout: "Example:\n  fencekit " + cmd.name})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, nil, 0, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stdout, tt.stdout) || !strings.Contains(r.stderr, tt.stderr) {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s\nwant stdout with %q, stderr with %q", r.code, tt.code, r.stdout, r.stderr, tt.stdout, tt.stderr)
			}
		})
	}
}

// TestParseInterspersed checks that flags may follow the resource, and that "--" ends them.
func TestParseInterspersed(t *testing.T) {
	t.Parallel()
	c := &cli{stdout: io.Discard, stderr: io.Discard}
	fs, o := c.newFlags("show", "", "")
	pos, _, ok := c.parse(fs, []string{"order-42", "--json", "-u", "redis://h:1", "--", "-odd", "--cluster"})
	if !ok || !slices.Equal(pos, []string{"order-42", "-odd", "--cluster"}) || !o.json || o.cluster || o.url != "redis://h:1" {
		t.Errorf("got %q, ok %v, %+v", pos, ok, o)
	}
}
