// Package statetest is the conformance suite of webhook.State: the same
// test bodies run against every implementation (memstate, and redisstate on
// a real Redis).
//
// A State's own tests call Run with a Backend that opens it:
//
//	func TestConformance(t *testing.T) {
//		statetest.Run(t, func(*testing.T) webhook.State { return memstate.New() })
//	}
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

// Backend returns an empty State for one test. Every behaviour opens its
// own.
type Backend func(t *testing.T) webhook.State

// Run runs every behaviour of the suite on newState, each as a subtest of t
// named after the behaviour.
func Run(t *testing.T, newState Backend) {
	for _, c := range behaviours {
		t.Run(c.name, func(t *testing.T) { c.test(t, newState) })
	}
}

// behaviour is one entry of the suite: a test body that opens its State
// from the backend.
type behaviour struct {
	name string
	test func(t *testing.T, newState Backend)
}

// behaviours is the whole suite. A behaviour exists only as an entry of this
// table, which Run iterates, so none can be written and then left out of a
// backend's run.
var behaviours = []behaviour{
	{"Create_List_Get_Delete", createListGetDelete},
	{"ErrExists", errExists},
	{"Cursor", cursor},
	{"DeadLetters_and_Replay", deadLettersAndReplay},
	{"Changes", changes},
	{"DeadLetters_bounded", deadLettersBounded},
	{"Quota_per_principal", quotaPerPrincipal},
}

var ctx = context.Background()

// subscription is a new API subscription to url, with a fresh id and
// secret.
func subscription(url string) webhook.Subscription {
	return webhook.Subscription{ID: webhook.NewID(), URL: url, Prefix: "ci:", Types: []lock.EventType{lock.EventReleased},
		Secrets: []string{webhook.NewSecret()}, Source: webhook.SourceAPI, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
}

// createListGetDelete: a subscription is stored whole, with its cursor, and
// its Delete takes the cursor along and leaves the others.
func createListGetDelete(t *testing.T, newState Backend) {
	s := newState(t)
	a, b := subscription("https://a.example/"), subscription("https://b.example/")
	for _, x := range []webhook.Subscription{a, b} {
		if err := s.Create(ctx, x, "5-0", 0); err != nil {
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
}

// errExists: a second subscription of the same URL, prefix and types is
// refused, and not stored, until the first is deleted.
func errExists(t *testing.T, newState Backend) {
	s := newState(t)
	a := subscription("https://a.example/")
	if err := s.Create(ctx, a, "", 0); err != nil {
		t.Fatal(err)
	}
	dup := subscription("https://a.example/")
	err := s.Create(ctx, dup, "", 0)
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
	if err := s.Create(ctx, dup, "", 0); err != nil {
		t.Fatalf("Create after the original's Delete: %v", err)
	}
}

// cursor: a cursor is kept for any id, subscribed through the API or not,
// the empty cursor included.
func cursor(t *testing.T, newState Backend) {
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
}

// deadLettersAndReplay: dead letters are listed in event order and paged; a
// replay moves one to the replays until DoneReplay; and a subscription's
// Delete takes its letters along.
func deadLettersAndReplay(t *testing.T, newState Backend) {
	s := newState(t)
	a := subscription("https://a.example/")
	if err := s.Create(ctx, a, "", 0); err != nil {
		t.Fatal(err)
	}
	// Event order, not string order: 9-0 before 10-0.
	for _, id := range []string{"10-0", "9-0", "10-1"} {
		if err := s.AddDeadLetter(ctx, a.ID, deadLetter(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddDeadLetter(ctx, a.ID, deadLetter("9-0")); err != nil { // again: replaces
		t.Fatal(err)
	}
	all, err := s.DeadLetters(ctx, a.ID, "", 0)
	if err != nil || !slices.Equal(eventIDs(all), []string{"9-0", "10-0", "10-1"}) {
		t.Fatalf("DeadLetters = %v, %v", eventIDs(all), err)
	}
	if d := all[0]; string(d.Payload) != `{"id":"9-0"}` || d.Attempts != 3 || d.LastStatus != 500 || d.LastError == "" || d.FailedAt.IsZero() {
		t.Fatalf("letter = %+v", d)
	}
	if page, _ := s.DeadLetters(ctx, a.ID, "9-0", 1); !slices.Equal(eventIDs(page), []string{"10-0"}) {
		t.Fatalf("page after 9-0 = %v", eventIDs(page))
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
	if err != nil || !slices.Equal(eventIDs(rs), []string{"10-0"}) || string(rs[0].Payload) != `{"id":"10-0"}` {
		t.Fatalf("Replays = %+v, %v", rs, err)
	}
	if rest, _ := s.DeadLetters(ctx, a.ID, "", 0); !slices.Equal(eventIDs(rest), []string{"9-0", "10-1"}) {
		t.Fatalf("DeadLetters after Replay = %v", eventIDs(rest))
	}
	if err := s.DoneReplay(ctx, a.ID, "10-0"); err != nil {
		t.Fatal(err)
	}
	if rs, _ := s.Replays(ctx, a.ID, 10); len(rs) != 0 {
		t.Fatalf("Replays after DoneReplay = %v", eventIDs(rs))
	}

	if err := s.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if rest, _ := s.DeadLetters(ctx, a.ID, "", 0); len(rest) != 0 {
		t.Fatalf("dead letters outlived their subscription: %v", eventIDs(rest))
	}
}

// deadLetter is the letter of event id after three failed attempts.
func deadLetter(id string) webhook.DeadLetter {
	return webhook.DeadLetter{EventID: id, Payload: json.RawMessage(fmt.Sprintf(`{"id":%q}`, id)), Attempts: 3, LastStatus: 500,
		LastError: "the receiver answered 500", FailedAt: time.Now().UTC().Truncate(time.Millisecond)}
}

// eventIDs are the event ids of ds, in their order.
func eventIDs(ds []webhook.DeadLetter) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, d.EventID)
	}
	return out
}

// changes: a State that is a Notifier tells of what moves a subscription
// (Create, Replay, Delete), of nothing else, and closes its channel when
// the context ends.
func changes(t *testing.T, newState Backend) {
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
	a := subscription("https://a.example/")
	if err := s.Create(ctx, a, "", 0); err != nil {
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
}

// deadLettersBounded: a subscription keeps at most MaxDeadLetters letters,
// the newest.
func deadLettersBounded(t *testing.T, newState Backend) {
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
}

// quotaPerPrincipal: past its quota a principal's create is refused and
// stores nothing; another principal, and a create without a quota, are
// not affected; a deleted subscription frees its place.
func quotaPerPrincipal(t *testing.T, newState Backend) {
	s := newState(t)
	mine := func(url, principal string) webhook.Subscription {
		sub := subscription(url)
		sub.Principal = principal
		return sub
	}
	first := mine("https://a.example/1", "alice")
	for _, sub := range []webhook.Subscription{first, mine("https://a.example/2", "alice"), mine("https://b.example/1", "bob")} {
		if err := s.Create(ctx, sub, "", 2); err != nil {
			t.Fatal(err)
		}
	}
	over := mine("https://a.example/3", "alice")
	if err := s.Create(ctx, over, "", 2); lock.ErrorCode(err) != lock.CodeQuotaExceeded {
		t.Fatalf("a create past the quota: %v", err)
	}
	if _, err := s.Get(ctx, over.ID); lock.ErrorCode(err) != webhook.CodeNotFound {
		t.Fatal("a create refused for its quota was stored")
	}
	// Its dedupe key was not kept either: with room, it is made.
	if err := s.Delete(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, over, "", 2); err != nil {
		t.Fatalf("a create after a delete freed a place: %v", err)
	}
	if err := s.Create(ctx, mine("https://a.example/4", "alice"), "", 2); lock.ErrorCode(err) != lock.CodeQuotaExceeded {
		t.Fatalf("a create past the quota again: %v", err)
	}
	if err := s.Create(ctx, mine("https://a.example/5", "alice"), "", 0); err != nil {
		t.Fatalf("a create without a quota: %v", err)
	}
}
