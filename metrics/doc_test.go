package metrics

import (
	"errors"
	"go/parser"
	"go/token"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestDocListsFamilies: every family the collector describes is named in the package
// documentation's list, whole or as a stem in braces ("pinmalloc_uvm_{...,policy_errors}_total"
// names pinmalloc_uvm_policy_errors_total). The list left out pinmalloc_uvm_policy_errors_total.
func TestDocListsFamilies(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "metrics.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	// Expand the alternatives of one word: pinmalloc_uvm_moved_{blocks,bytes}_total.
	alts := regexp.MustCompile(`([a-z_]*_)\{([a-z_,]+)\}([a-z_]*)`)
	doc := alts.ReplaceAllStringFunc(f.Doc.Text(), func(w string) string {
		m := alts.FindStringSubmatch(w)
		var out []string
		for _, alt := range strings.Split(m[2], ",") {
			out = append(out, m[1]+alt+m[3])
		}
		return strings.Join(out, " ")
	})
	ch := make(chan *prometheus.Desc)
	go func() { New().Describe(ch); close(ch) }()
	nameRE := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range ch {
		m := nameRE.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		name := m[1]
		if regexp.MustCompile(`\b` + name + `\b`).MatchString(doc) {
			continue
		}
		stem := regexp.MustCompile(`^pinmalloc_(host|device|uvm)_`).ReplaceAllString(name, "")
		stem = strings.TrimSuffix(strings.TrimSuffix(stem, "_total"), "_bytes")
		if !regexp.MustCompile(`[{,\s]_?` + stem + `([},\s]|_total|_bytes)`).MatchString(doc) {
			t.Errorf("%s is not in the package documentation's list of families", name)
		}
	}
}

// TestOneCollectorPerRegistry: what the package documentation says of a second Collector.
func TestOneCollectorPerRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(New()); err != nil {
		t.Fatal(err)
	}
	var are prometheus.AlreadyRegisteredError
	if err := reg.Register(New()); !errors.As(err, &are) {
		t.Errorf("a second Collector's Register = %v, want prometheus.AlreadyRegisteredError", err)
	}
}
