package lockapi_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxFuncLines is the longest a library function may be, from its func
// keyword to its closing brace: past it, a function does several things
// that want names of their own (issue 19 §6).
const maxFuncLines = 80

// TestFunctionLength fails for any function longer than maxFuncLines in
// the library code (internal/, client/, fence/), tests and generated files
// aside.
func TestFunctionLength(t *testing.T) {
	var long []string
	for _, root := range []string{"internal", "client", "fence"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !libraryFile(path) {
				return err
			}
			found, err := longFuncs(path)
			long = append(long, found...)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(long)
	for _, l := range long {
		t.Errorf("%s: longer than %d lines: split it into named steps", l, maxFuncLines)
	}
}

// libraryFile reports whether path is library Go source: neither a test
// nor a generated file.
func libraryFile(path string) bool {
	return strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") && !strings.HasSuffix(path, ".gen.go")
}

// longFuncs lists the functions of one file longer than maxFuncLines,
// function literals included, as "path:line name (n lines)".
func longFuncs(path string) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	if ast.IsGenerated(f) {
		return nil, nil
	}
	var long []string
	ast.Inspect(f, func(n ast.Node) bool {
		name := ""
		switch fn := n.(type) {
		case *ast.FuncDecl:
			name = fn.Name.Name
			if fn.Recv != nil && len(fn.Recv.List) == 1 {
				name = recvName(fn.Recv.List[0].Type) + "." + name
			}
		case *ast.FuncLit:
			name = "func literal"
		default:
			return true
		}
		from, to := fset.Position(n.Pos()), fset.Position(n.End())
		if lines := to.Line - from.Line + 1; lines > maxFuncLines {
			long = append(long, fmt.Sprintf("%s:%d %s (%d lines)", filepath.ToSlash(path), from.Line, name, lines))
		}
		return true
	})
	return long, nil
}

// recvName is a method receiver's type name, without pointer or type
// parameters.
func recvName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return "?"
		}
	}
}
