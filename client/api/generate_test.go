package api_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGenerated fails when api.gen.go is not what the go:generate
// directive in generate.go writes from openapi.yaml today: after an edit of
// the spec, the config or the generator's version, run
// `go generate ./client/...` and commit the result.
func TestGenerated(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the generator")
	}
	goBin, err := exec.LookPath("go") // go test puts its own go first on PATH
	if err != nil {
		t.Fatalf("the go command is needed to run the generator: %v", err)
	}
	out := filepath.Join(t.TempDir(), "api.gen.go")
	cmd := exec.Command(goBin, "tool", "oapi-codegen", "-config", "oapi-codegen.yaml", "-o", out, "../../openapi.yaml")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, msg)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("api.gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("api.gen.go is stale: run `go generate ./client/...` and commit the result\n%s", firstDifference(got, want))
	}
}

// firstDifference describes the first line where got and want differ.
func firstDifference(got, want []byte) string {
	g, w := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl []byte
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if !bytes.Equal(gl, wl) {
			return fmt.Sprintf("line %d:\n  committed:   %s\n  regenerated: %s", i+1, gl, wl)
		}
	}
	return "(only line endings differ)"
}
