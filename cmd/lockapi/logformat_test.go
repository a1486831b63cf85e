package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
)

// Console logs carry colour codes only on a terminal, and never with
// NO_COLOR set: a file or a log collector reading stderr gets plain text.
func TestConsoleLog_colour_only_on_a_terminal(t *testing.T) {
	logLine := func(t *testing.T, terminal bool) string {
		t.Helper()
		saved := isTerminal
		t.Cleanup(func() { isTerminal = saved })
		if terminal {
			isTerminal = func(io.Writer) bool { return true }
		}
		var buf bytes.Buffer
		log, err := newLogger(serveConfig{LogLevel: "info", LogFormat: "console"}, &buf)
		if err != nil {
			t.Fatal(err)
		}
		log.Info().Str("url", "http://127.0.0.1:8080").Msg("lockapi listening")
		if !strings.Contains(buf.String(), "lockapi listening") {
			t.Fatalf("no message: %q", buf.String())
		}
		return buf.String()
	}
	t.Run("NotATerminal", func(t *testing.T) {
		t.Setenv("NO_COLOR", "")
		if line := logLine(t, false); strings.Contains(line, "\x1b[") {
			t.Errorf("colour codes on a writer that is no terminal: %q", line)
		}
	})
	t.Run("Pipe", func(t *testing.T) {
		t.Setenv("NO_COLOR", "")
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close()
		if isTerminal(w) {
			t.Error("a pipe taken for a terminal")
		}
	})
	t.Run("Terminal", func(t *testing.T) {
		t.Setenv("NO_COLOR", "")
		if line := logLine(t, true); !strings.Contains(line, "\x1b[") {
			t.Errorf("no colour on a terminal: %q", line)
		}
	})
	t.Run("TerminalWithNO_COLOR", func(t *testing.T) {
		t.Setenv("NO_COLOR", "1")
		if line := logLine(t, true); strings.Contains(line, "\x1b[") {
			t.Errorf("colour codes despite NO_COLOR: %q", line)
		}
	})
}
