package tests

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestQuickStart plays a newcomer's first hour: the binary started with no
// configuration at all, the browser pointed at its address, the short help,
// the version, then the README's curl walkthrough against that same server.
func TestQuickStart(t *testing.T) {
	s := startBare(t)

	t.Run("TheListeningLineSaysWhereToGo", func(t *testing.T) {
		for _, want := range []string{
			`"dashboard":"` + s.URL + `/ui/"`,
			`"api":"` + s.URL + `/v1/"`,
			`"openapi":"` + s.URL + `/openapi.yaml"`,
		} {
			if !strings.Contains(s.Logs(), want) {
				t.Errorf("the startup log lacks %s:\n%s", want, s.Logs())
			}
		}
	})

	t.Run("TheRootShowsTheDashboard", func(t *testing.T) {
		resp, err := http.Get(s.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/ui/" ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !bytes.Contains(body, []byte("<html")) {
			t.Errorf("GET / ended at %s: %d %q\n%s", resp.Request.URL, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	})

	t.Run("HelpIsShort", func(t *testing.T) {
		out := newcomer(t, "-h")
		if lines := strings.Count(out, "\n"); lines > 25 || !strings.Contains(out, "usage: lockapi") {
			t.Errorf("lockapi -h: %d lines, want a short overview:\n%s", lines, out)
		}
	})

	t.Run("Version", func(t *testing.T) {
		if out := newcomer(t, "version"); !strings.HasPrefix(out, "lockapi ") {
			t.Errorf("lockapi version:\n%s", out)
		}
	})

	t.Run("READMEWalkthrough", func(t *testing.T) {
		needWalkthroughTools(t)
		runWalkthrough(t, s)
	})
}

// newcomer runs the binary with args in an environment of PATH and HOME
// only, and returns what it printed; it fails t unless it exits 0.
func newcomer(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lockapi %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
