// Package docsample finds the shell samples a page of documentation marks
// to be run, so that a test runs them as written and they stay true.
//
// A page marks a section with the HTML comments <!-- NAME:start --> and
// <!-- NAME:end -->, which a reader of the rendered page does not see. The
// ```sh blocks inside a section, in order, are one script; other blocks
// (the answers shown, JSON) are for the reader only.
package docsample

import (
	"fmt"
	"strings"
)

// Script is the shell of one marked section.
type Script struct {
	Line int    // the line of the section's start marker, from 1
	Text string // its ```sh blocks, joined in order
}

// Scripts returns the scripts of page's sections marked name, in the
// page's order. A start marker without its end, an end without a start,
// or a section without a shell block is an error.
func Scripts(page, name string) ([]Script, error) {
	start, end := "<!-- "+name+":start -->", "<!-- "+name+":end -->"
	var out []Script
	rest, offset := page, 0
	for {
		i := strings.Index(rest, start)
		if i < 0 {
			break
		}
		line := strings.Count(page[:offset+i], "\n") + 1
		section, tail, found := strings.Cut(rest[i+len(start):], end)
		if !found {
			return nil, fmt.Errorf("line %d: %s has no %s", line, start, end)
		}
		if strings.Contains(section, start) {
			return nil, fmt.Errorf("line %d: %s again before its %s", line, start, end)
		}
		text := shellBlocks(section)
		if text == "" {
			return nil, fmt.Errorf("line %d: the section %s has no ```sh block", line, name)
		}
		out = append(out, Script{Line: line, Text: text})
		offset += len(rest) - len(tail)
		rest = tail
	}
	if strings.Contains(rest, end) {
		return nil, fmt.Errorf("line %d: %s without its %s", strings.Count(page[:offset+strings.Index(rest, end)], "\n")+1, end, start)
	}
	return out, nil
}

// shellBlocks returns the ```sh blocks of section, joined in order.
func shellBlocks(section string) string {
	var script strings.Builder
	for {
		_, after, found := strings.Cut(section, "```sh\n")
		if !found {
			return script.String()
		}
		block, tail, _ := strings.Cut(after, "```")
		script.WriteString(block)
		section = tail
	}
}
