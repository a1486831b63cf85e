// Package proctest holds what the test helpers that run server processes
// (redistest, pgtest) share: picking a port and showing a log's tail.
package proctest

import (
	"net"
	"os"
	"strings"
)

// FreePort asks the kernel for a free loopback port. The port is released
// before the server binds it, so callers retry when the bind fails.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Tail returns the last n lines of the file at path, for failure messages.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
