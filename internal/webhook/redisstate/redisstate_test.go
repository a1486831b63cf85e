package redisstate_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/layout"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
	"github.com/lockapi/lockapi/internal/testkit/statetest"
	"github.com/lockapi/lockapi/internal/webhook"
	"github.com/lockapi/lockapi/internal/webhook/redisstate"
)

// newState returns a State on rdb under a prefix of the test's own, whose
// keys are deleted when the test ends.
func newState(t *testing.T, rdb goredis.UniversalClient) webhook.State {
	prefix := "test:" + ulid.Make().String() + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		del := func(c *goredis.Client) {
			iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
		}
		switch c := rdb.(type) {
		case *goredis.Client:
			del(c)
		case *goredis.ClusterClient:
			_ = c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error { del(n); return nil })
		}
	})
	return redisstate.New(rdb, prefix, 0)
}

func TestConformance(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	statetest.Run(t, func(t *testing.T) webhook.State { return newState(t, rdb) })
}

// TestConformance_cluster: a subscription's keys share a slot, so the
// same commands work on Redis Cluster.
func TestConformance_cluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	rdb := redistest.StartCluster(t).Client(t)
	statetest.Run(t, func(t *testing.T) webhook.State { return newState(t, rdb) })
}

// TestKeys pins the key names: other instances, and operators, find the
// State by them.
func TestKeys(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	s := redisstate.New(rdb, "pin:", 0)
	t.Cleanup(func() {
		rdb.Del(ctx, "pin:webhooks:subs", "pin:webhooks:dedupe", "pin:webhooks:{wh:abc}:cursor", "pin:webhooks:{wh:abc}:dead", "pin:webhooks:{wh:abc}:replay")
	})
	sub := webhook.Subscription{ID: "abc", URL: "https://a.example/", Secrets: []string{webhook.NewSecret()}, Source: webhook.SourceAPI}
	if err := s.Create(ctx, sub, "1-0", 0); err != nil {
		t.Fatal(err)
	}
	if err := s.AddDeadLetter(ctx, "abc", webhook.DeadLetter{EventID: "2-0", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	for key, typ := range map[string]string{
		"pin:webhooks:subs":            "hash",
		"pin:webhooks:dedupe":          "hash",
		"pin:webhooks:{wh:abc}:cursor": "string",
		"pin:webhooks:{wh:abc}:dead":   "hash",
	} {
		if got := rdb.Type(ctx, key).Val(); got != typ {
			t.Errorf("TYPE %s = %q, want %q", key, got, typ)
		}
	}
}

// TestUnavailable: a Redis that does not answer is CodeUnavailable.
func TestUnavailable(t *testing.T) {
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	_, err := redisstate.New(rdb, "x:", 0).List(context.Background())
	if lock.ErrorCode(err) != lock.CodeUnavailable {
		t.Fatalf("List on no Redis: %v", err)
	}
}

// TestChanges_across_instances_and_silence: notices cross instances (two
// clients, one prefix), and a connection silent past the health check's
// PING keeps its subscription without telling of changes that were none.
func TestChanges_across_instances_and_silence(t *testing.T) {
	srv := redistest.Start(t)
	prefix := "test:" + ulid.Make().String() + ":"
	a := redisstate.NewWithHealthEvery(srv.Client(t), prefix, 0, 100*time.Millisecond)
	b := redisstate.New(srv.Client(t), prefix, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := a.Changes(ctx)
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("not subscribed")
	}
	select {
	case <-ch:
		t.Fatal("a notice while nothing changed (past several health PINGs)")
	case <-time.After(time.Second):
	}
	sub := webhook.Subscription{ID: webhook.NewID(), URL: "https://a.example/", Secrets: []string{webhook.NewSecret()}, Source: webhook.SourceAPI}
	if err := b.Create(context.Background(), sub, "", 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Delete(context.Background(), sub.ID) })
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no notice of the other instance's Create")
	}
}

// TestLayout: subscriptions and dead letters are stored with "v": 1; one
// without v (v0.1.0's) reads as before, and one of a layout this version
// does not know is told, left out of List and the dead letters, and
// answered unavailable by Get.
func TestLayout(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	prefix := "test:" + ulid.Make().String() + ":"
	s := redisstate.New(rdb, prefix, 0)
	var told []string
	s.SetUnknownLayout(func(kind layout.Kind, v, at string) { told = append(told, string(kind)+" v="+v+" "+at) })
	subs := prefix + "webhooks:subs"
	old := webhook.Subscription{ID: "old", URL: "https://a.example/", Secrets: []string{webhook.NewSecret()}, Source: webhook.SourceAPI}
	if err := s.Create(ctx, old, "1-0", 0); err != nil {
		t.Fatal(err)
	}
	if err := s.AddDeadLetter(ctx, "old", webhook.DeadLetter{EventID: "2-0", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	data := rdb.HGet(ctx, subs, "old").Val()
	if !strings.HasPrefix(data, `{"v":1,"id":"old",`) {
		t.Fatalf("stored %s, want the layout first", data)
	}
	// As v0.1.0 wrote it, without v.
	rdb.HSet(ctx, subs, "old", `{"id":"old",`+strings.TrimPrefix(data, `{"v":1,"id":"old",`))
	rdb.HSet(ctx, subs, "new", `{"v":2,"id":"new","url":"https://b.example/"}`)
	rdb.HSet(ctx, prefix+"webhooks:{wh:old}:dead", "3-0", `{"v":"x\ny","event_id":"3-0"}`)

	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "old" || list[0].URL != old.URL {
		t.Fatalf("List = %+v, %v; want the subscription without v alone", list, err)
	}
	_, err = s.Get(ctx, "new")
	if lock.ErrorCode(err) != lock.CodeUnavailable {
		t.Fatalf("Get of an unknown layout: %v, want unavailable", err)
	}
	dead, err := s.DeadLetters(ctx, "old", "", 10)
	if err != nil || len(dead) != 1 || dead[0].EventID != "2-0" {
		t.Fatalf("DeadLetters = %+v, %v; want 2-0 alone", dead, err)
	}
	want := []string{"webhooks v=2 " + subs + " new", "webhooks v=2 " + subs + " new", "webhooks v=? " + prefix + "webhooks:{wh:old}:dead 3-0"}
	if !slices.Equal(told, want) {
		t.Errorf("told %q, want %q", told, want)
	}
}
