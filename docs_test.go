package lockapi

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The README is the front door and docs/ the reference. These tests keep
// the two linked: every relative link resolves, every page links back, and
// the README stays short enough to read.

// docPages returns README.md and every page of docs/, by path.
func docPages(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages := make(map[string]string)
	for _, p := range append(paths, "README.md") {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		pages[p] = string(b)
	}
	return pages
}

var (
	fence    = regexp.MustCompile("(?m)^ {0,3}```")
	codeSpan = regexp.MustCompile("`[^`\n]*`")
	// mdLink matches [text](target) and ![alt](target); the text may wrap.
	mdLink = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
)

// prose returns a page without its fenced code blocks, so that a shell
// comment or a JSON sample is not read as a heading or a link.
func prose(page string) string {
	parts := fence.Split(page, -1)
	var b strings.Builder
	for i, p := range parts {
		if i%2 == 0 {
			b.WriteString(p)
		}
	}
	return b.String()
}

// anchors returns the ids GitHub gives a page's headings: lower case, with
// spaces as hyphens and every other character but letters, digits, '-' and
// '_' dropped; a repeated heading gets "-1", "-2", ...
func anchors(page string) map[string]bool {
	ids := make(map[string]bool)
	seen := make(map[string]int)
	for line := range strings.SplitSeq(prose(page), "\n") {
		text, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		text = strings.TrimLeft(text, "#")
		if !strings.HasPrefix(text, " ") {
			continue
		}
		var id strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(text)) {
			switch {
			case r == ' ':
				id.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				id.WriteRune(r)
			}
		}
		s := id.String()
		if n := seen[s]; n > 0 {
			ids[s+"-"+strconv.Itoa(n)] = true
		} else {
			ids[s] = true
		}
		seen[s]++
	}
	return ids
}

// Every relative link of README.md and docs/*.md names a file that exists,
// and a link with #anchor names a heading of its page.
func TestDocs_links_resolve(t *testing.T) {
	pages := docPages(t)
	for path, page := range pages {
		text := codeSpan.ReplaceAllStringFunc(prose(page), func(s string) string {
			return strings.Repeat(" ", len(s)) // keep [`x`](y) a link
		})
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			linked := path
			if file != "" {
				linked = filepath.Join(filepath.Dir(path), file)
				if _, err := os.Stat(linked); err != nil {
					t.Errorf("%s links to %s, which does not exist", path, target)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			body, ok := pages[filepath.ToSlash(linked)]
			if !ok {
				b, err := os.ReadFile(linked)
				if err != nil {
					t.Errorf("%s links to %s: %v", path, target, err)
					continue
				}
				body = string(b)
			}
			if !anchors(body)[anchor] {
				t.Errorf("%s links to %s, but %s has no heading #%s", path, target, linked, anchor)
			}
		}
	}
}

// Each page of docs/ opens with its title and a one-line summary that links
// back to the README, and the README links to each page.
func TestDocs_front_door_and_back(t *testing.T) {
	pages := docPages(t)
	readme := pages["README.md"]
	for path, page := range pages {
		if path == "README.md" {
			continue
		}
		title, rest, _ := strings.Cut(page, "\n")
		if !strings.HasPrefix(title, "# ") {
			t.Errorf("%s does not start with a title", path)
		}
		summary, _, _ := strings.Cut(strings.TrimLeft(rest, "\n"), "\n\n")
		if !strings.Contains(summary, "](../README.md)") {
			t.Errorf("%s: the summary under the title does not link back to the README:\n%s", path, summary)
		}
		if !strings.Contains(readme, "]("+path+")") {
			t.Errorf("README.md does not link to %s", path)
		}
	}
}

// The README is a front door, not the manual: the reference is in docs/.
func TestREADME_is_short(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 300 {
		t.Errorf("README.md has %d lines, want at most 300: move reference material to docs/", n)
	}
}

// docs/API.md's problem types table lists every type of openapi.yaml's,
// with the same status.
func TestDocs_problem_types(t *testing.T) {
	b, err := os.ReadFile("docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^ *\\| `https://lockapi.dev/problems/([a-z-]+)` \\| ([0-9]{3}) \\|")
	spec := row.FindAllStringSubmatch(string(OpenAPI), -1)
	if len(spec) == 0 {
		t.Fatal("openapi.yaml has no table of problem types")
	}
	for _, m := range spec {
		if want := "| `" + m[1] + "` | " + m[2] + " |"; !strings.Contains(string(b), want) {
			t.Errorf("docs/API.md's problem types lack %s", want)
		}
	}
}

// Every LOCKAPI_* name the docs and the README give is in
// docs/CONFIGURATION.md's index of names: a row of its settings table, or
// its list of the names that are lockapi's but not settings (where
// LOCKAPI_TEST_* stands for a family). Its misspelling example, a code
// block of that page, is not looked at.
func TestDocs_every_LOCKAPI_name_is_in_the_configuration_table(t *testing.T) {
	pages := docPages(t)
	config := pages["docs/CONFIGURATION.md"]
	name := regexp.MustCompile(`LOCKAPI_[A-Z0-9_]*[A-Z0-9]`)
	indexed := map[string]bool{}
	for line := range strings.Lines(config) {
		if strings.HasPrefix(line, "|") {
			for _, n := range name.FindAllString(line, -1) {
				indexed[n] = true
			}
		}
	}
	// The list is the paragraph after the one that introduces it.
	_, others, ok := strings.Cut(config, "but not settings of the server")
	_, others, _ = strings.Cut(others, "\n\n")
	others, _, _ = strings.Cut(others, "\n\n")
	if !ok || len(indexed) == 0 {
		t.Fatal("docs/CONFIGURATION.md has no settings table, or no list of the other names")
	}
	for _, n := range name.FindAllString(others, -1) {
		indexed[n] = true
	}
	for path, page := range pages {
		if path == "docs/CONFIGURATION.md" {
			page = prose(page)
		}
		for _, n := range name.FindAllString(page, -1) {
			if !indexed[n] && !(indexed["LOCKAPI_TEST"] && strings.HasPrefix(n, "LOCKAPI_TEST_")) {
				t.Errorf("%s names %s, which docs/CONFIGURATION.md's table does not", path, n)
			}
		}
	}
}
