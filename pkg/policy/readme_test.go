package policy

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

const readme = "../../README.md"

// readmeRow is a row of the README's compatibility table.
type readmeRow struct {
	line    int
	kinds   []string // "Name.group"
	support Support
	anchors []string
}

var (
	tableKind   = regexp.MustCompile("`([A-Z][A-Za-z]+)`|\\(([^)]+)\\)")
	tableAnchor = regexp.MustCompile(`\]\((#[^)]+)\)`)
	// readmeGroups are the group names the table writes in brackets.
	readmeGroups = map[string]string{
		"security":                        groupSecurity,
		"networking":                      groupNetworking,
		"telemetry":                       groupTelemetry,
		"extensions":                      groupExtensions,
		"Gateway API":                     groupGatewayAPI,
		"Gateway API experimental":        groupGatewayAPIX,
		"Gateway API Inference Extension": groupInference,
		"Kubernetes":                      groupIngress,
	}
)

// compatibilityTable reads the table under "## Compatibility with Istio".
func compatibilityTable(t *testing.T, doc string) []readmeRow {
	t.Helper()
	lines := strings.Split(doc, "\n")
	start := -1
	for i, l := range lines {
		if l == "## Compatibility with Istio" {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("%s: no \"## Compatibility with Istio\" section", readme)
	}
	var rows []readmeRow
	inTable := false
	for i := start + 1; i < len(lines) && !strings.HasPrefix(lines[i], "## "); i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		if strings.Trim(l, "|-") == "" {
			continue // the line under the header
		}
		cells := strings.Split(strings.Trim(l, "|"), " | ")
		if len(cells) != 3 {
			t.Fatalf("%s:%d: %d cells, want 3: %s", readme, i+1, len(cells), l)
		}
		first := strings.TrimSpace(cells[0])
		if first == "Istio kind or feature" {
			continue
		}
		row := readmeRow{line: i + 1}
		word, _, _ := strings.Cut(strings.TrimSpace(cells[1]), " ")
		row.support = Support(strings.TrimSuffix(word, ":"))
		var pending []string
		for _, m := range tableKind.FindAllStringSubmatch(first, -1) {
			if m[1] != "" {
				pending = append(pending, m[1])
				continue
			}
			group, ok := readmeGroups[m[2]]
			if !ok {
				continue // a remark in brackets, not a group
			}
			for _, k := range pending {
				row.kinds = append(row.kinds, k+"."+group)
			}
			pending = nil
		}
		if len(pending) > 0 {
			t.Errorf("%s:%d: kinds %v without a group in brackets after them", readme, i+1, pending)
		}
		for _, m := range tableAnchor.FindAllStringSubmatch(cells[2], -1) {
			row.anchors = append(row.anchors, m[1])
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: the compatibility table has no rows", readme)
	}
	return rows
}

// headingAnchors are the anchors GitHub gives the README's headings.
func headingAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	for l := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
				b.WriteRune(r)
			}
		}
		out["#"+b.String()] = true
	}
	return out
}

// TestREADMETableIsTheListOfKinds: the README's compatibility table names
// every kind of Kinds, and no other, each once, honoured as Kinds says
// and linking to the section Kinds names; every link of the table leads
// to a heading of the README.
func TestREADMETableIsTheListOfKinds(t *testing.T) {
	data, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	rows := compatibilityTable(t, doc)
	headings := headingAnchors(doc)
	inTable := map[string]readmeRow{}
	for _, row := range rows {
		switch row.support {
		case Honoured, Partly, Not:
		default:
			t.Errorf("%s:%d: support %q, want honoured, partly or not", readme, row.line, row.support)
		}
		for _, a := range row.anchors {
			if !headings[a] {
				t.Errorf("%s:%d: link %s leads to no heading", readme, row.line, a)
			}
		}
		for _, k := range row.kinds {
			if prev, ok := inTable[k]; ok {
				t.Errorf("%s:%d: %s already in the row of line %d", readme, row.line, k, prev.line)
			}
			inTable[k] = row
		}
	}
	for _, k := range Kinds() {
		row, ok := inTable[k.String()]
		if !ok {
			t.Errorf("%s is not in the README's compatibility table", k)
			continue
		}
		delete(inTable, k.String())
		if row.support != k.Support {
			t.Errorf("%s:%d: %s is %q in the README, %q in pkg/policy", readme, row.line, k, row.support, k.Support)
		}
		if len(row.anchors) != 1 || row.anchors[0] != k.Section {
			t.Errorf("%s:%d: %s links to %v, want %s", readme, row.line, k, row.anchors, k.Section)
		}
	}
	for k, row := range inTable {
		t.Errorf("%s:%d: %s is in the README's table but not in pkg/policy", readme, row.line, k)
	}
}
