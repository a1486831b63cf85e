package main

import (
	"fmt"
	"slices"
	"strings"
)

// otherNames are the LOCKAPI_* variables that are lockapi's own but no
// setting of serve's table: serve neither reads them nor warns about them.
// docs/CONFIGURATION.md lists them; TestEnviron_every_name_in_the_repository_is_known
// keeps this list whole.
var otherNames = map[string]string{
	// Read by the command-line clients (run, status, events) and by the
	// SDKs' default constructors; LOCKAPI_SERVER is LOCKAPI_URL's
	// deprecated older name, which the command-line clients still read.
	"LOCKAPI_URL":     "client",
	"LOCKAPI_API_KEY": "client",
	"LOCKAPI_SERVER":  "client",
	// Set by `lockapi run` for the command it runs.
	"LOCKAPI_LOCK":          "run",
	"LOCKAPI_LEASE_ID":      "run",
	"LOCKAPI_FENCING_TOKEN": "run",
	// Read by lockapi's own test suites and the SDKs' tests, which start
	// servers in the environment they run in; LOCKAPI_TEST_* too (testPrefix).
	"LOCKAPI_KEY":                "test",
	"LOCKAPI_ADMIN_KEY":          "test",
	"LOCKAPI_NARROW_KEY":         "test",
	"LOCKAPI_LIMITED_KEY":        "test",
	"LOCKAPI_EXPIRED_KEY":        "test",
	"LOCKAPI_STORE":              "test",
	"LOCKAPI_LINEARIZE_SEED":     "test",
	"LOCKAPI_LINEARIZE_OPS":      "test",
	"LOCKAPI_CONTRACT_SEED":      "test",
	"LOCKAPI_CONTRACT_N":         "test",
	"LOCKAPI_HISTORY":            "test",
	"LOCKAPI_PROMISE":            "test",
	"LOCKAPI_RECORD_RELIABILITY": "test",
	"LOCKAPI_UI_SCREENSHOT":      "test",
	"LOCKAPI_UI_SCREENSHOTS":     "test",
	"LOCKAPI_E2E_SESSION_HOLDER": "test",
}

// clientKeyOnServer is the warning of a server with no keys started with
// LOCKAPI_API_KEY set: a known name, the clients', so no unknown variable,
// yet most likely a misspelling of LOCKAPI_API_KEYS that leaves the
// server open.
const clientKeyOnServer = "LOCKAPI_API_KEY is read by clients; the server's keys are LOCKAPI_API_KEYS or LOCKAPI_API_KEYS_FILE"

// testPrefix begins the variables of the test suites that name a service
// to test against (LOCKAPI_TEST_REDIS_URL and the like).
const testPrefix = "LOCKAPI_TEST_"

// unknownVariables returns, for each variable of environ (KEY=value) that
// begins with LOCKAPI_ and is no setting of table nor one of otherNames,
// the line that says so, with the closest setting when one is close, in
// the order of environ.
func unknownVariables(environ []string, table []setting) []string {
	var settings []string
	for _, s := range table {
		settings = append(settings, envName(s.name))
	}
	var lines []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "LOCKAPI_") || strings.HasPrefix(name, testPrefix) ||
			otherNames[name] != "" || slices.Contains(settings, name) {
			continue
		}
		line := name + " is not a lockapi setting"
		if near := closest(name, settings); near != "" {
			line += "; did you mean " + near + "?"
		}
		lines = append(lines, line)
	}
	return lines
}

// closest returns the name of names nearest to name in edits (letters
// added, dropped, changed or swapped), if it is near enough to be what was
// meant: at most a third of the name after LOCKAPI_, and 3 edits at most.
func closest(name string, names []string) string {
	best, bestD := "", 0
	for _, n := range names {
		d := editDistance(strings.TrimPrefix(name, "LOCKAPI_"), strings.TrimPrefix(n, "LOCKAPI_"))
		if best == "" || d < bestD {
			best, bestD = n, d
		}
	}
	limit := min(3, max(1, len(strings.TrimPrefix(name, "LOCKAPI_"))/3))
	if best == "" || bestD > limit {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b: the
// fewest insertions, deletions, substitutions and swaps of two adjacent
// bytes that turn a into b.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// strictEnvError is the refusal of unknown variables under
// LOCKAPI_STRICT_ENV=true: one line each.
type strictEnvError []string

func (e strictEnvError) Error() string {
	var b strings.Builder
	for i, line := range e {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s (%s=true refuses it)", line, envName("strict-env"))
	}
	return b.String()
}
