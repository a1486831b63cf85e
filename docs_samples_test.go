package lockapi_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/testkit/docsample"
	"github.com/lockapi/lockapi/internal/testkit/memserver"
)

// Every section of docs/ marked <!-- runnable:start --> ... <!--
// runnable:end --> runs as written, as the README's walkthrough does: its
// shell blocks, as one script, under bash -euo pipefail, against a fresh
// server on the memory store at $LOCKAPI. curl fails on an error status
// (a .curlrc with --fail-with-body), so a sample the server refuses fails
// here, though the page shows no such flag.
func TestDocs_runnable_samples_run(t *testing.T) {
	needTools(t, "bash", "curl", "jq")
	paths, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		scripts, err := docsample.Scripts(string(b), "runnable")
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		for _, script := range scripts {
			n++
			t.Run(filepath.Base(path)+":"+strconv.Itoa(script.Line), func(t *testing.T) {
				t.Parallel()
				runSample(t, memserver.Start(t), script.Text)
			})
		}
	}
	if n == 0 {
		t.Fatal("docs/ marks no runnable sample")
	}
}

// needTools skips the test (fails it under CI) when a tool the samples run
// is missing.
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("the docs' samples need %s (apt-get install %s)", tool, tool)
			}
			t.Skipf("the docs' samples need %s", tool)
		}
	}
}

// runSample runs script in a temporary directory against the server at url.
func runSample(t *testing.T, url, script string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ".curlrc"), []byte("--fail-with-body\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LOCKAPI="+url, "CURL_HOME="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the sample failed: %v\n--- script\n%s--- output\n%s", err, script, out)
	}
}
