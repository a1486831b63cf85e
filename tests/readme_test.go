package tests

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/testkit/docsample"
	"github.com/lockapi/lockapi/internal/testkit/pgtest"
	"github.com/lockapi/lockapi/migrations"
)

// walkthrough returns the shell blocks of the README's curl walkthrough, in
// order, as one script.
func walkthrough(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	scripts, err := docsample.Scripts(string(b), "walkthrough")
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	if len(scripts) != 1 {
		t.Fatalf("README.md has %d walkthrough sections, want 1", len(scripts))
	}
	return scripts[0].Text
}

// TestREADME_walkthrough runs the README's curl walkthrough as written
// against the real binary and a real PostgreSQL with the fencing migration.
func TestREADME_walkthrough(t *testing.T) {
	needWalkthroughTools(t)
	s := startServer(t, []string{"LOCKAPI_REDIS_URL="})
	runWalkthrough(t, s)
}

// needWalkthroughTools skips the test (fails it under CI) when a tool the
// walkthrough runs is missing.
func needWalkthroughTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"bash", "curl", "psql", "sed"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("the README walkthrough needs %s (apt-get install %s)", tool, tool)
			}
			t.Skipf("the README walkthrough needs %s", tool)
		}
	}
}

// runWalkthrough runs the README's walkthrough against s, with a fresh
// PostgreSQL database that has the fencing migration, and checks what it
// printed.
func runWalkthrough(t *testing.T, s *server) {
	t.Helper()
	pg := pgtest.Start(t)
	dsn := pg.NewDatabase(t)
	db := pgtest.Open(t, dsn)
	if err := migrations.Up(context.Background(), db); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", walkthrough(t))
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "LOCKAPI="+s.URL, "DATABASE_URL="+dsn)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the walkthrough failed: %v\n%s", err, out)
	}
	for _, want := range []string{`"hold_count":1`, `"held":true`, `"released":true`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the walkthrough's output lacks %s:\n%s", want, out)
		}
	}
}
