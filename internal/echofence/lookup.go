package echofence

import "strings"

// lookupExtractor checks a KeyLookup string, builds Echo's extractors for it with create, and
// returns an extractor that returns the first value of the first source whose first value is
// not empty. Only the first value of a source counts, since it is the one c.Param,
// c.QueryParam and Header.Get give the handler.
func lookupExtractor[C any](lookup string, create func(string) ([]func(c C) ([]string, error), error)) (func(c C) (string, error), error) {
	if err := checkLookup(lookup); err != nil {
		return nil, err
	}
	extractors, err := create(lookup)
	if err != nil {
		return nil, invalidf("KeyLookup %q: %v", lookup, err)
	}
	return func(c C) (string, error) {
		var last error
		for _, extract := range extractors {
			values, err := extract(c)
			if err != nil {
				last = err
				continue
			}
			if len(values) > 0 && values[0] != "" {
				return values[0], nil
			}
		}
		return "", last
	}, nil
}

// checkLookup accepts comma-separated sources of the forms "param:<name>", "header:<name>"
// (with an optional ":<cut-prefix>"), "query:<name>", "form:<name>" and "cookie:<name>": the
// sources Echo's CreateExtractors knows, which silently ignores others.
func checkLookup(lookup string) error {
	for _, src := range strings.Split(lookup, ",") {
		kind, name, _ := strings.Cut(src, ":")
		switch kind {
		case "param", "header", "query", "form", "cookie":
		default:
			name = ""
		}
		if name == "" || strings.HasPrefix(name, ":") {
			return invalidf("KeyLookup source %q: want param:<name>, header:<name>, query:<name>, form:<name> or cookie:<name>", src)
		}
	}
	return nil
}
