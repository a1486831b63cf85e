// Package statetest is the conformance suite of webhook.State: the same
// test bodies run against every implementation (memstate, and redisstate on
// a real Redis).
package statetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/webhook"
)

// Run runs the suite; newState returns an empty State for one test.
func Run(t *testing.T, newState func(t *testing.T) webhook.State) {
	ctx := context.Background()
	sub := func(url string) webhook.Subscription {
		return webhook.Subscription{ID: webhook.NewID(), URL: url, Prefix: "ci:", Types: []lock.EventType{lock.EventReleased},
			Secrets: []string{webhook.NewSecret()}, Source: webhook.SourceAPI, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	}

	t.Run("Create_List_Get_Delete", func(t *testing.T) {
		s := newState(t)
		a, b := sub("https://a.example/"), sub("https://b.example/")
		for _, x := range []webhook.Subscription{a, b} {
			if err := s.Create(ctx, x, "5-0"); err != nil {
				t.Fatal(err)
			}
		}
		list, err := s.List(ctx)
		if err != nil || len(list) != 2 {
			t.Fatalf("List = %+v, %v", list, err)
		}
		got, err := s.Get(ctx, a.ID)
		if err != nil || got.URL != a.URL || !slices.Equal(got.Secrets, a.Secrets) || !got.CreatedAt.Equal(a.CreatedAt) || !slices.Equal(got.Types, a.Types) {
			t.Fatalf("Get = %+v, %v; want %+v", got, err, a)
		}
		if c, ok, err := s.Cursor(ctx, a.ID); err != nil || !ok || c != "5-0" {
			t.Fatalf("Cursor after Create = %q %v %v", c, ok, err)
		}
		if err := s.Delete(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, a.ID); lock.ErrorCode(err) != webhook.CodeNotFound {
			t.Fatalf("Get after Delete: %v", err)
		}
		if err := s.Delete(ctx, a.ID); lock.ErrorCode(err) != webhook.CodeNotFound {
			t.Fatalf("Delete twice: %v", err)
		}
		if _, ok, _ := s.Cursor(ctx, a.ID); ok {
			t.Fatal("the cursor outlived its subscription")
		}
		if list, _ := s.List(ctx); len(list) != 1 || list[0].ID != b.ID {
			t.Fatalf("List after Delete = %+v", list)
		}
	})

	t.Run("ErrExists", func(t *testing.T) {
		s := newState(t)
		a := sub("https://a.example/")
		if err := s.Create(ctx, a, ""); err != nil {
			t.Fatal(err)
		}
		dup := sub("https://a.example/")
		err := s.Create(ctx, dup, "")
		if lock.ErrorCode(err) != webhook.CodeExists {
			t.Fatalf("duplicate Create: %v", err)
		}
		if _, err := s.Get(ctx, dup.ID); lock.ErrorCode(err) != webhook.CodeNotFound {
			t.Fatal("a refused duplicate was stored")
		}
		// Once the first is gone, the same subscription may be made again.
		if err := s.Delete(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.Create(ctx, dup, ""); err != nil {
			t.Fatalf("Create after the original's Delete: %v", err)
		}
	})

	t.Run("Cursor", func(t *testing.T) {
		s := newState(t)
		// Cursors of the file's subscriptions live in the State too.
		if _, ok, err := s.Cursor(ctx, "from-file"); ok || err != nil {
			t.Fatalf("Cursor of a fresh id: %v %v", ok, err)
		}
		for _, c := range []string{"", "1-0", "17-3"} {
			if err := s.SetCursor(ctx, "from-file", c); err != nil {
				t.Fatal(err)
			}
			if got, ok, err := s.Cursor(ctx, "from-file"); got != c || !ok || err != nil {
				t.Fatalf("Cursor = %q %v %v, want %q", got, ok, err, c)
			}
		}
	})

	t.Run("DeadLetters_and_Replay", func(t *testing.T) {
		s := newState(t)
		a := sub("https://a.example/")
		if err := s.Create(ctx, a, ""); err != nil {
			t.Fatal(err)
		}
		letter := func(id string) webhook.DeadLetter {
			return webhook.DeadLetter{EventID: id, Payload: json.RawMessage(fmt.Sprintf(`{"id":%q}`, id)), Attempts: 3, LastStatus: 500,
				LastError: "the receiver answered 500", FailedAt: time.Now().UTC().Truncate(time.Millisecond)}
		}
		// Event order, not string order: 9-0 before 10-0.
		for _, id := range []string{"10-0", "9-0", "10-1"} {
			if err := s.AddDeadLetter(ctx, a.ID, letter(id)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.AddDeadLetter(ctx, a.ID, letter("9-0")); err != nil { // again: replaces
			t.Fatal(err)
		}
		ids := func(ds []webhook.DeadLetter) []string {
			out := []string{}
			for _, d := range ds {
				out = append(out, d.EventID)
			}
			return out
		}
		all, err := s.DeadLetters(ctx, a.ID, "", 0)
		if err != nil || !slices.Equal(ids(all), []string{"9-0", "10-0", "10-1"}) {
			t.Fatalf("DeadLetters = %v, %v", ids(all), err)
		}
		if d := all[0]; string(d.Payload) != `{"id":"9-0"}` || d.Attempts != 3 || d.LastStatus != 500 || d.LastError == "" || d.FailedAt.IsZero() {
			t.Fatalf("letter = %+v", d)
		}
		if page, _ := s.DeadLetters(ctx, a.ID, "9-0", 1); !slices.Equal(ids(page), []string{"10-0"}) {
			t.Fatalf("page after 9-0 = %v", ids(page))
		}

		if err := s.Replay(ctx, a.ID, "10-0"); err != nil {
			t.Fatal(err)
		}
		if err := s.Replay(ctx, a.ID, "10-0"); lock.ErrorCode(err) != webhook.CodeNotFound {
			t.Fatalf("Replay of a replayed letter: %v", err)
		}
		if err := s.Replay(ctx, a.ID, "11-0"); lock.ErrorCode(err) != webhook.CodeNotFound {
			t.Fatalf("Replay of no letter: %v", err)
		}
		rs, err := s.Replays(ctx, a.ID, 10)
		if err != nil || !slices.Equal(ids(rs), []string{"10-0"}) || string(rs[0].Payload) != `{"id":"10-0"}` {
			t.Fatalf("Replays = %+v, %v", rs, err)
		}
		if rest, _ := s.DeadLetters(ctx, a.ID, "", 0); !slices.Equal(ids(rest), []string{"9-0", "10-1"}) {
			t.Fatalf("DeadLetters after Replay = %v", ids(rest))
		}
		if err := s.DoneReplay(ctx, a.ID, "10-0"); err != nil {
			t.Fatal(err)
		}
		if rs, _ := s.Replays(ctx, a.ID, 10); len(rs) != 0 {
			t.Fatalf("Replays after DoneReplay = %v", ids(rs))
		}

		if err := s.Delete(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		if rest, _ := s.DeadLetters(ctx, a.ID, "", 0); len(rest) != 0 {
			t.Fatalf("dead letters outlived their subscription: %v", ids(rest))
		}
	})

	t.Run("Changes", func(t *testing.T) {
		s := newState(t)
		n, ok := s.(webhook.Notifier)
		if !ok {
			t.Skip("the State is no Notifier")
		}
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch := n.Changes(cctx)
		notice := func(what string) {
			t.Helper()
			select {
			case _, ok := <-ch:
				if !ok {
					t.Fatalf("%s: Changes closed", what)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: no notice", what)
			}
		}
		quiet := func(what string) {
			t.Helper()
			select {
			case <-ch:
				t.Fatalf("a notice after %s", what)
			case <-time.After(100 * time.Millisecond):
			}
		}
		notice("subscribing") // changes before it may have been missed
		quiet("subscribing")
		a := sub("https://a.example/")
		if err := s.Create(ctx, a, ""); err != nil {
			t.Fatal(err)
		}
		notice("Create")
		// What moves no subscription tells nothing.
		if err := s.SetCursor(ctx, a.ID, "1-0"); err != nil {
			t.Fatal(err)
		}
		if err := s.AddDeadLetter(ctx, a.ID, webhook.DeadLetter{EventID: "1-0", Payload: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.List(ctx); err != nil {
			t.Fatal(err)
		}
		quiet("SetCursor, AddDeadLetter and List")
		if err := s.Replay(ctx, a.ID, "1-0"); err != nil {
			t.Fatal(err)
		}
		notice("Replay")
		if err := s.Delete(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		notice("Delete")
		cancel()
		select {
		case _, ok := <-ch:
			if ok {
				t.Fatal("a notice after the context ended")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Changes not closed when its context ended")
		}
	})

	t.Run("DeadLetters_bounded", func(t *testing.T) {
		if testing.Short() {
			t.Skip("adds MaxDeadLetters letters")
		}
		s := newState(t)
		for i := range webhook.MaxDeadLetters + 2 {
			if err := s.AddDeadLetter(ctx, "busy", webhook.DeadLetter{EventID: fmt.Sprintf("%d-0", i+1), Payload: json.RawMessage(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
		all, err := s.DeadLetters(ctx, "busy", "", 0)
		if err != nil || len(all) != webhook.MaxDeadLetters || all[0].EventID != "3-0" {
			t.Fatalf("%d letters from %v, %v; want %d from 3-0", len(all), all[0].EventID, err, webhook.MaxDeadLetters)
		}
	})
}
