//go:build unix

package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// minNodeMajor is the oldest Node.js the TypeScript client runs on: it needs
// the global fetch and AbortSignal.timeout.
const minNodeMajor = 18

// TestTypeScriptClient checks that openapi.yaml makes a working client in
// another language: in tests/ts it generates TypeScript types from the spec
// (openapi-typescript), type-checks and compiles a scenario that calls the API
// through openapi-fetch, and runs it with Node.js against the real binary on
// the embedded memory store. A spec change that breaks the generated client
// fails the type check; a server that breaks the contract fails the scenario.
// The scenario reads problem types as an open set (a type added later must
// type-check), reads only headers the spec models on each response, and
// checks in the served /openapi.json that those it relies on are required.
//
// It needs node and npm, and the npm registry for `npm ci`. Without node or
// npm the test is skipped, unless CI is set, where it fails.
func TestTypeScriptClient(t *testing.T) {
	t.Parallel() // beside the fault suite: see TestFaults
	node := lookTool(t, "node")
	npm := lookTool(t, "npm")
	checkNodeVersion(t, node)

	dir, err := filepath.Abs("ts")
	if err != nil {
		t.Fatal(err)
	}
	install := []string{"ci"}
	if _, err := os.Stat(filepath.Join(dir, "package-lock.json")); errors.Is(err, fs.ErrNotExist) {
		install = []string{"install"}
	}
	runTool(t, dir, 10*time.Minute, nil, npm, append(install, "--no-audit", "--no-fund")...)

	// Nothing generated or built by an earlier run may stand in for this one's.
	for _, stale := range []string{filepath.Join(dir, "src", "schema.ts"), filepath.Join(dir, "dist")} {
		if err := os.RemoveAll(stale); err != nil {
			t.Fatal(err)
		}
	}
	runTool(t, dir, 2*time.Minute, nil, npm, "run", "generate")
	// tsc exits non-zero on a type error even while it emits, so the
	// build is also the type check (npm run typecheck would repeat it).
	runTool(t, dir, 3*time.Minute, nil, npm, "run", "build")

	s := startServer(t, []string{"LOCKAPI_REDIS_URL="})
	out := runTool(t, dir, 2*time.Minute, []string{"LOCKAPI_URL=" + s.URL}, node, filepath.Join("dist", "scenario.js"))
	if !regexp.MustCompile(`(?m)^[1-9][0-9]* passed, 0 failed$`).Match(out) {
		t.Fatalf("the scenario exited 0 without an \"N passed, 0 failed\" line:\n%s", out)
	}
	t.Logf("scenario output:\n%s", out)
}

// lookTool finds a program on PATH. A missing one skips the test, or fails it
// when CI is set.
func lookTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		missingTool(t, fmt.Sprintf("%s is not on PATH: the TypeScript client test needs Node.js >= %d and npm (on Debian: apt-get install nodejs npm)", name, minNodeMajor))
	}
	return path
}

func missingTool(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg + "; skipped because CI is not set")
}

// checkNodeVersion treats a Node.js older than minNodeMajor like a missing one.
func checkNodeVersion(t *testing.T, node string) {
	t.Helper()
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", node, err)
	}
	v := strings.TrimSpace(string(out))
	major, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(v, "v"), ".", 2)[0])
	if err != nil {
		t.Fatalf("%s --version printed %q", node, v)
	}
	if major < minNodeMajor {
		missingTool(t, fmt.Sprintf("%s is Node.js %s: the TypeScript client test needs Node.js >= %d", node, v, minNodeMajor))
	}
	t.Logf("node %s at %s", v, node)
}

// runTool runs a program in dir with extra environment variables and returns
// its combined output. It fails the test, with that output, when the program
// exits non-zero or runs longer than timeout (kept within the test's own
// deadline). On timeout the program's whole process group is killed, so npm's
// children do not outlive it.
func runTool(t *testing.T, dir string, timeout time.Duration, env []string, name string, args ...string) []byte {
	t.Helper()
	if deadline, ok := t.Deadline(); ok {
		// Leave time to report the output before go test's own timeout panics.
		if left := time.Until(deadline) - 30*time.Second; left < timeout {
			timeout = max(left, time.Second)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()

	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out

	line := filepath.Base(name) + " " + strings.Join(args, " ")
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start).Round(100 * time.Millisecond)
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		// Killed by the deadline. A program that finished as the deadline
		// passed is judged by its own exit status below.
		t.Fatalf("%s (in %s) did not finish within %s:\n%s", line, dir, timeout, out.Bytes())
	}
	if err != nil {
		t.Fatalf("%s (in %s) failed after %s: %v\n%s", line, dir, took, err, out.Bytes())
	}
	t.Logf("%s: ok in %s", line, took)
	return out.Bytes()
}
