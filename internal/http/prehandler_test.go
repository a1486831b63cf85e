package http_test

import (
	"bufio"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/lockapi/lockapi"
	lockhttp "github.com/lockapi/lockapi/internal/http"
)

// TestErrors_BeforeTheHandler sends requests that fail before any handler
// runs, over a raw connection. Those lockapi answers (no route, a wrong
// method, a body too large or not JSON, a malformed query) are problem+json
// with an X-Request-ID; those Go's net/http answers itself, before lockapi
// sees the request, are not, and docs/API.md and openapi.yaml list each of
// them.
func TestErrors_BeforeTheHandler(t *testing.T) {
	e := MustOpenEnv(t, lockhttp.Config{})
	apiDoc, err := os.ReadFile("../../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(apiDoc), "<!-- net/http answers:start -->")
	table, _, _ = strings.Cut(table, "<!-- net/http answers:end -->")
	_, specTable, _ := strings.Cut(string(lockapi.OpenAPI), "**Answers before lockapi.**")
	specTable, _, _ = strings.Cut(specTable, "**")

	for _, tc := range []struct {
		name    string
		request string // the request line and any headers
		status  int
		problem bool // answered by lockapi, as problem+json
	}{
		{"NoRoute404", "GET /nowhere HTTP/1.1", http.StatusNotFound, true},
		{"DoubleSlash404", "GET //v1/locks/a HTTP/1.1", http.StatusNotFound, true},
		{"WrongMethod405", "PUT /v1/locks/a HTTP/1.1", http.StatusMethodNotAllowed, true},
		{"UnknownMethod405", "BREW /v1/locks/a HTTP/1.1", http.StatusMethodNotAllowed, true},
		{"BodyTooLarge413", "POST /v1/locks/a/leases HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 100000", http.StatusRequestEntityTooLarge, true},
		{"NotJSON415", "POST /v1/locks/a/leases HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}", http.StatusUnsupportedMediaType, true},
		{"MalformedQuery400", "GET /v1/locks/a?x=%zz HTTP/1.1", http.StatusBadRequest, true},

		{"MalformedPath400", "GET /v1/locks/%zz HTTP/1.1", http.StatusBadRequest, false},
		{"MalformedHeader400", "GET /v1/locks/a HTTP/1.1\r\nBad Header: x", http.StatusBadRequest, false},
		{"Expect417", "GET /v1/locks/a HTTP/1.1\r\nExpect: something", http.StatusExpectationFailed, false},
		{"HeadersTooLarge431", "GET /v1/locks/a HTTP/1.1\r\nX-Big: " + strings.Repeat("a", 70<<10), http.StatusRequestHeaderFieldsTooLarge, false},
		{"TransferEncoding501", "POST /v1/locks/a/leases HTTP/1.1\r\nTransfer-Encoding: gzip", http.StatusNotImplemented, false},
		{"Version505", "GET /v1/locks/a HTTP/9.9", http.StatusHTTPVersionNotSupported, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := rawRequest(t, e.URL, tc.request)
			defer resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tc.status)
			}
			ct := resp.Header.Get("Content-Type")
			if tc.problem {
				if ct != "application/problem+json" || resp.Header.Get("X-Request-ID") == "" {
					t.Fatalf("lockapi's answer: Content-Type %q, X-Request-ID %q; want a problem with a request id", ct, resp.Header.Get("X-Request-ID"))
				}
				return
			}
			if ct == "application/problem+json" {
				t.Fatalf("net/http's answer is a problem now: list it no longer as net/http's")
			}
			row := "| `" + strconv.Itoa(tc.status) + "` |"
			if !strings.Contains(table, row) {
				t.Errorf("docs/API.md's table of net/http's answers lacks %d", tc.status)
			}
			if !strings.Contains(specTable, row) {
				t.Errorf("openapi.yaml's table of net/http's answers lacks %d", tc.status)
			}
		})
	}
}

// rawRequest sends request, as it is, on a new connection to the server at
// base, and reads the answer.
func rawRequest(t *testing.T, base, request string) *http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	head, body, _ := strings.Cut(request, "\r\n\r\n")
	if _, err := conn.Write([]byte(head + "\r\nHost: lockapi\r\nConnection: close\r\n\r\n" + body)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
