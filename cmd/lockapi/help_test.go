package main

import (
	"flag"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the help texts printed now")

// Every command prints its help on stdout and exits 0, in one style: the
// texts are pinned in testdata/*.golden (go test -run Help -update
// rewrites them after a deliberate change).
func TestHelp_golden(t *testing.T) {
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"lockapi", []string{"-h"}},
		{"lockapi", []string{"--help"}},
		{"lockapi", []string{"help"}},
		{"serve", []string{"serve", "-h"}},
		{"serve", []string{"--help", "--addr", ":0"}},
		{"run", []string{"run", "-h"}},
		{"status", []string{"status", "--help"}},
		{"events", []string{"events", "-h"}},
		{"history", []string{"history", "-h"}},
		{"top", []string{"top", "-h"}},
		{"keys-new", []string{"keys", "new", "-h"}},
		{"keys-new", []string{"keys", "-h"}},
		{"version", []string{"version", "-h"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := lockapi(t, tc.args...)
			if r.Code != 0 || r.Stderr != "" {
				t.Fatalf("exit %d, want 0 and nothing on stderr\nstderr: %s", r.Code, r.Stderr)
			}
			path := filepath.Join("testdata", tc.golden+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(r.Stdout), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if r.Stdout != string(want) {
				t.Errorf("help differs from %s (go test -run Help -update rewrites it):\n%s", path, r.Stdout)
			}
		})
	}
}

// The overview fits a screen, and names every command.
func TestHelp_overview_is_short(t *testing.T) {
	if n := strings.Count(overview, "\n"); n > 40 {
		t.Errorf("the overview has %d lines, want at most 40", n)
	}
	for _, cmd := range []string{"serve", "run", "status", "events", "keys new", "version", "lockapi serve -h", "docs/"} {
		if !strings.Contains(overview, cmd) {
			t.Errorf("the overview does not name %q", cmd)
		}
	}
}

// lockapi version prints the release version (else the module version) and the VCS revision the Go
// toolchain recorded.
func TestVersion(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/lockapi/lockapi", Version: "v1.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "1cd01a4"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := versionText("", info, true), "lockapi v1.4.0\nrevision: 1cd01a4 (with uncommitted changes)\ngo: go1.26.0\n"; got != want {
		t.Errorf("version:\n%s\nwant:\n%s", got, want)
	}
	// A release build names its version (-ldflags -X main.version=...),
	// whatever the module version says.
	if got, want := versionText("v0.2.0", info, true), "lockapi v0.2.0\nrevision: 1cd01a4 (with uncommitted changes)\ngo: go1.26.0\n"; got != want {
		t.Errorf("release version:\n%s\nwant:\n%s", got, want)
	}
	if r := lockapi(t, "version"); r.Code != 0 || !strings.HasPrefix(r.Stdout, "lockapi ") || !strings.Contains(r.Stdout, "revision: ") {
		t.Errorf("lockapi version: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
}
