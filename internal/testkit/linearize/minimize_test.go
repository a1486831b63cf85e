package linearize

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestMinimize reads a history written by Dump (LOCKAPI_HISTORY=path),
// checks each name's part of it under LOCKAPI_PROMISE (strict or redlock,
// default redlock) and prints, for each illegal part, the shortest illegal
// prefix shrunk to a smallest illegal subsequence (dropping one operation
// at a time while the rest stays illegal).
func TestMinimize(t *testing.T) {
	path := os.Getenv("LOCKAPI_HISTORY")
	if path == "" {
		t.Skip("LOCKAPI_HISTORY names no history")
	}
	p := Redlock
	if os.Getenv("LOCKAPI_PROMISE") == "strict" {
		p = Strict
	}
	ops := parseDump(t, path)
	m := Model(p)
	illegal := func(ops []porcupine.Operation) bool {
		return porcupine.CheckOperationsTimeout(m, ops, 10*time.Second) == porcupine.Illegal
	}
	for _, part := range byLock(ops) {
		name := part[0].Input.(Input).Lock
		if !illegal(part) {
			t.Logf("%s: %d operations, linearizable", name, len(part))
			continue
		}
		// The shortest prefix (in order of call) that is illegal.
		n := len(part)
		for n > 1 && illegal(closePrefix(part[:n-1])) {
			n--
		}
		min := shrink(closePrefix(part[:n]), illegal)
		var b strings.Builder
		for _, op := range min {
			ret := "inf"
			if op.Return != Infinity {
				ret = strconv.FormatInt(op.Return, 10)
			}
			fmt.Fprintf(&b, "  %d %s client %d: %s\n", op.Call, ret, op.ClientId, describe(op.Input, op.Output))
		}
		t.Logf("%s: %d operations ILLEGAL; illegal prefix of %d, minimal %d:\n%s", name, len(part), n, len(min), b.String())
		b.Reset()
		last := part[n-1]
		for _, op := range part[:n] {
			if op.Return >= last.Call-20_000_000 {
				fmt.Fprintf(&b, "  %d %d client %d: %s\n", op.Call, op.Return, op.ClientId, describe(op.Input, op.Output))
			}
		}
		t.Logf("%s: the prefix's operations that end within 20 ms of its last call:\n%s", name, b.String())
	}
}

// shrink drops whole leases (every operation that names one: its grant,
// re-entries, releases and the refusals naming its token) and then single
// operations that name none, while the history stays illegal.
func shrink(ops []porcupine.Operation, illegal func([]porcupine.Operation) bool) []porcupine.Operation {
	group := func(op porcupine.Operation) string {
		in, out := op.Input.(Input), op.Output.(Output)
		switch {
		case in.Kind == Release:
			return in.LeaseID
		case out.LeaseID != "":
			return out.LeaseID
		case out.HolderToken != 0:
			for _, o := range ops {
				if g := o.Output.(Output); g.Token == out.HolderToken && g.LeaseID != "" {
					return g.LeaseID
				}
			}
		}
		return ""
	}
	for changed := true; changed; {
		changed = false
		var groups []string
		for _, op := range ops {
			if g := group(op); g != "" && !slices.Contains(groups, g) {
				groups = append(groups, g)
			}
		}
		for _, g := range groups {
			rest := slices.DeleteFunc(slices.Clone(ops), func(op porcupine.Operation) bool { return group(op) == g })
			if illegal(rest) {
				ops, changed = rest, true
			}
		}
		for i := 0; i < len(ops); i++ {
			if group(ops[i]) != "" {
				continue
			}
			rest := slices.Delete(slices.Clone(ops), i, i+1)
			if illegal(rest) {
				ops, changed = rest, true
				i--
			}
		}
	}
	return ops
}

// closePrefix is a prefix of a history as it is: operations are kept
// whole, since each was answered.
func closePrefix(ops []porcupine.Operation) []porcupine.Operation { return slices.Clone(ops) }

var (
	dumpLine = regexp.MustCompile(`^(\d+) (\d+|inf) client (\d+): (acquire|release)\(([^ )]+) ([^ )]+)((?: [a-z0-9]+)*)\) -> (.*)$`)
	grantRe  = regexp.MustCompile(`^(20[01]) (\S+) token (\d+) holds (\d+)$`)
	relRe    = regexp.MustCompile(`^200 holds (\d+) released (true|false)$`)
	heldRe   = regexp.MustCompile(`^409 held by (\S*) token (\d+)$`)
	probRe   = regexp.MustCompile(`^(\d{3}) (\S+)$`)
)

// parseDump reads a history that Dump wrote.
func parseDump(t *testing.T, path string) []porcupine.Operation {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ops []porcupine.Operation
	sc := bufio.NewScanner(f)
	for i := 0; sc.Scan(); i++ {
		g := dumpLine.FindStringSubmatch(sc.Text())
		if g == nil {
			t.Fatalf("line %d: %q", i+1, sc.Text())
		}
		call, _ := strconv.ParseInt(g[1], 10, 64)
		ret := int64(Infinity)
		if g[2] != "inf" {
			ret, _ = strconv.ParseInt(g[2], 10, 64)
		}
		client, _ := strconv.Atoi(g[3])
		in := Input{Lock: g[5], Tag: fmt.Sprintf("t%d", i)}
		mods := strings.Fields(g[7])
		if g[4] == "acquire" {
			in.Kind, in.Owner = Acquire, g[6]
			for j := 0; j < len(mods); j++ {
				switch mods[j] {
				case "shared":
					in.Shared = true
				case "fair":
					in.Fair = true
				case "limit":
					j++
					in.Limit, _ = strconv.Atoi(mods[j])
				}
			}
		} else {
			in.Kind, in.LeaseID, in.All = Release, g[6], slices.Contains(mods, "all")
		}
		var out Output
		a := g[8]
		switch {
		case a == "5xx (abandoned)":
			out = Output{Unknown: true, Abandoned: true}
		case a == "?":
			out = Output{Unknown: true}
		case grantRe.MatchString(a):
			s := grantRe.FindStringSubmatch(a)
			out.Status, _ = strconv.Atoi(s[1])
			out.LeaseID = s[2]
			out.Token, _ = strconv.ParseUint(s[3], 10, 64)
			out.HoldCount, _ = strconv.Atoi(s[4])
		case relRe.MatchString(a):
			s := relRe.FindStringSubmatch(a)
			out.Status = 200
			out.HoldCount, _ = strconv.Atoi(s[1])
			out.Released = s[2] == "true"
		case heldRe.MatchString(a):
			s := heldRe.FindStringSubmatch(a)
			out.Status, out.Problem, out.HolderOwner = 409, "lock-held", s[1]
			out.HolderToken, _ = strconv.ParseUint(s[2], 10, 64)
		case probRe.MatchString(a):
			s := probRe.FindStringSubmatch(a)
			out.Status, _ = strconv.Atoi(s[1])
			out.Problem = s[2]
		default:
			t.Fatalf("line %d: answer %q", i+1, a)
		}
		ops = append(ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	}
	return ops
}
