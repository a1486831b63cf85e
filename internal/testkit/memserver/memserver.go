// Package memserver starts lockapi's HTTP server in the test's process, on
// the embedded memory store and a free loopback port, for tests that speak
// to the API as a client would.
package memserver

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/eventfeed"
	"github.com/lockapi/lockapi/internal/history"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/store/memory"
)

// Start serves a fresh memory store with signed release URLs, and returns
// the server's base URL. Both are closed when t ends.
func Start(t testing.TB) string {
	t.Helper()
	mem := memory.New()
	t.Cleanup(func() { _ = mem.Close() })
	release, err := auth.NewReleaseSigner(auth.RandomSecret())
	if err != nil {
		t.Fatal(err)
	}
	// One feed and a history window on it, as lockapi serve has.
	feed := eventfeed.New(mem.Events(), eventfeed.Options{})
	hist := history.Start(feed, mem.Events(), history.Options{})
	t.Cleanup(feed.Close)
	t.Cleanup(hist.Close)
	srv := lockhttp.NewServer(mem, lockhttp.Config{Logger: zerolog.Nop(), Release: release, Events: feed, History: hist})
	if err := srv.Open("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Close(ctx)
	})
	return srv.URL()
}
