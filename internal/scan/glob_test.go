package scan

import "testing"

func TestGlob(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"*", "", true},
		{"*", "a/b", true},
		{"order-*", "order-42", true},
		{"order-*", "orders", false},
		{"*42", "order-42", true},
		{"o?der*", "order-1", true},
		{"*[{}]*", "{braced}", true},
		{"*[{}]*", "plain", false},
		{"[^a]*", "abc", false},
		{"[!a]*", "bcd", true},
		{"[a-c]x", "bx", true},
		{`\*`, "*", true},
		{`\*`, "a", false},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYbZ", false},
	}
	for _, tt := range tests {
		if got := Match(tt.pattern, tt.name); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
	if got := EscapeGlob(`a*b?[c]\`); got != `a\*b\?\[c\]\\` {
		t.Errorf("EscapeGlob: got %q", got)
	}
}
