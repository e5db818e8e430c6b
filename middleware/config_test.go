package middleware_test

import (
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"testing"

	fencemw "github.com/fencekit/fencekit/middleware"
)

// TestConfigGoDoc checks that go doc lists every field of Config and IdempotencyConfig, each
// with its own doc comment, as it lists the fields of Echo's own middleware configs.
func TestConfigGoDoc(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found:", err)
	}
	goDoc := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := exec.Command(goTool, append([]string{"doc"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go doc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[fencemw.Config](), reflect.TypeFor[fencemw.IdempotencyConfig]()} {
		name := typ.Name()
		if typ.NumField() == 0 {
			t.Fatalf("%s has no fields", name)
		}
		all := goDoc(t, ".", name)
		for i := range typ.NumField() {
			f := typ.Field(i)
			t.Run(name+"."+f.Name, func(t *testing.T) {
				field := regexp.MustCompile(`(?m)^\s+` + f.Name + ` \S`)
				comment := regexp.MustCompile(`(?m)^\s+// ` + f.Name + `\b`)
				if !field.MatchString(all) {
					t.Errorf("go doc . %s does not list field %s:\n%s", name, f.Name, all)
				}
				out := goDoc(t, ".", name+"."+f.Name)
				if !field.MatchString(out) || !comment.MatchString(out) {
					t.Errorf("go doc . %s.%s shows no doc comment that names the field:\n%s", name, f.Name, out)
				}
			})
		}
	}
}
