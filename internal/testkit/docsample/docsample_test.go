package docsample

import (
	"strings"
	"testing"
)

func TestScripts(t *testing.T) {
	page := "# Page\n\n<!-- run:start -->\nSay hello:\n\n```sh\necho hello\n```\n\n```json\n{}\n```\n\n```sh\necho again\n```\n<!-- run:end -->\n\n```sh\necho unmarked\n```\n\n<!-- run:start -->\n```sh\necho second\n```\n<!-- run:end -->\n"
	got, err := Scripts(page, "run")
	if err != nil {
		t.Fatal(err)
	}
	want := []Script{{Line: 3, Text: "echo hello\necho again\n"}, {Line: 23, Text: "echo second\n"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Scripts = %+v, want %+v", got, want)
	}
	if got, err := Scripts(page, "other"); err != nil || len(got) != 0 {
		t.Errorf("another name: %+v, %v", got, err)
	}
}

func TestScripts_malformed(t *testing.T) {
	for name, c := range map[string]struct{ page, err string }{
		"NoEnd":       {"<!-- run:start -->\n```sh\ntrue\n```\n", "line 1: <!-- run:start --> has no <!-- run:end -->"},
		"NoStart":     {"text\n<!-- run:end -->\n", "line 2: <!-- run:end --> without its <!-- run:start -->"},
		"Nested":      {"<!-- run:start -->\n<!-- run:start -->\n```sh\ntrue\n```\n<!-- run:end -->\n", "line 1: <!-- run:start --> again"},
		"NoShell":     {"<!-- run:start -->\n```json\n{}\n```\n<!-- run:end -->\n", "line 1: the section run has no ```sh block"},
		"EndAfterEnd": {"<!-- run:start -->\n```sh\ntrue\n```\n<!-- run:end -->\n<!-- run:end -->\n", "line 6: <!-- run:end --> without"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Scripts(c.page, "run"); err == nil || !strings.HasPrefix(err.Error(), c.err) {
				t.Errorf("error %v, want %q...", err, c.err)
			}
		})
	}
}
