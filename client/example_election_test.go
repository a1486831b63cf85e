package client_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockapi/lockapi/client"
	lockhttp "github.com/lockapi/lockapi/internal/http"
)

// The worked example of docs/ELECTIONS.md, "Go": the page shows the code
// between the markers below as written, which TestElectionsDoc_Go holds
// it to, and runs.

// docs:start
// lead campaigns for "reports:leader" as node, announces addr, runs work
// while it leads, and resigns. work's ctx ends the moment the leadership
// is lost; it must fence every write with the term.
func lead(ctx context.Context, c *client.Client, node, addr string, work func(ctx context.Context, term uint64) error) error {
	l, err := c.Campaign(ctx, "reports:leader", map[string]string{"addr": addr}, client.CampaignOptions{Owner: node, TTL: 10 * time.Second})
	if err != nil {
		return err
	}
	defer l.Resign(context.WithoutCancel(ctx))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-l.Lost(): // stop acting as leader at once
			cancel()
		case <-wctx.Done():
		}
	}()
	// A new value, without giving up leadership: every observer sees it.
	if err := l.Proclaim(ctx, map[string]string{"addr": addr, "state": "serving"}); err != nil {
		return err
	}
	return work(wctx, l.Term())
}

// follow writes the leader to w every time it changes, until ctx ends.
func follow(ctx context.Context, c *client.Client, w io.Writer) {
	for info := range c.Observe(ctx, "reports:leader") {
		if !info.Elected {
			fmt.Fprintln(w, "no leader")
			continue
		}
		fmt.Fprintf(w, "leader %s at %s (%s), term %d\n", info.Owner, info.Value["addr"], info.Value["state"], info.Term)
	}
}

// docs:end

// TestElectionsDoc_Go checks that docs/ELECTIONS.md shows the code above
// as written, and runs it: a follower sees the leader, its proclaimed
// state, and then nobody once it resigned.
func TestElectionsDoc_Go(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("example_election_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, code, _ := strings.Cut(string(src), "// docs:start\n")
	code, _, _ = strings.Cut(code, "// docs:end\n")
	page, err := os.ReadFile("../docs/ELECTIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	if shown := sampleOf(t, string(page), "go"); strings.TrimSpace(shown) != strings.TrimSpace(code) {
		t.Fatalf("docs/ELECTIONS.md's Go sample is not the code of example_election_test.go between its markers:\n--- page\n%s\n--- code\n%s", shown, code)
	}

	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &lines{changed: make(chan struct{}, 1)}
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		follow(ctx, e.Client, out)
	}()
	out.await(t, "no leader")
	err = lead(ctx, e.Client, "node-1", "10.0.0.7:9000", func(ctx context.Context, term uint64) error {
		out.await(t, fmt.Sprintf("leader node-1 at 10.0.0.7:9000 (serving), term %d", term))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out.await(t, "no leader") // again, after the resignation
	cancel()
	<-followed
}

// sampleOf returns the ```lang block of the section of page marked
// <!-- sample:lang:start --> ... <!-- sample:lang:end -->.
func sampleOf(t *testing.T, page, lang string) string {
	t.Helper()
	_, section, ok := strings.Cut(page, "<!-- sample:"+lang+":start -->")
	section, _, ok2 := strings.Cut(section, "<!-- sample:"+lang+":end -->")
	_, block, ok3 := strings.Cut(section, "```"+lang+"\n")
	block, _, ok4 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 || !ok4 {
		t.Fatalf("docs/ELECTIONS.md has no ```%s block marked sample:%s", lang, lang)
	}
	return block
}

// lines is an io.Writer that keeps what was written, line by line, and
// says when it changed.
type lines struct {
	mu      sync.Mutex
	text    strings.Builder
	seen    int // how many lines await has passed over
	changed chan struct{}
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.text.Write(p)
	l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
	return len(p), nil
}

// await waits until a line written after the last one it found is want.
func (l *lines) await(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(2 * promptly)
	for {
		l.mu.Lock()
		all := strings.Split(strings.TrimSuffix(l.text.String(), "\n"), "\n")
		for i := l.seen; i < len(all); i++ {
			if all[i] == want {
				l.seen = i + 1
				l.mu.Unlock()
				return
			}
		}
		got := l.text.String()
		l.mu.Unlock()
		select {
		case <-l.changed:
		case <-deadline:
			t.Fatalf("no line %q; written:\n%s", want, got)
		}
	}
}
