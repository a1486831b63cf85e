package event_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/lockapi/lockapi/event"
)

func TestMarshal(t *testing.T) {
	q := 0
	e := event.Event{
		ID: "1-0", Type: event.Expired, Lock: "a", Owner: "<o&>", Mode: event.Shared, FencingToken: 7,
		QueueLength: &q, Session: "s", Time: time.Date(2026, 11, 23, 18, 0, 0, 999999999, time.FixedZone("CET", 3600)),
	}
	const want = `{"id":"1-0","type":"expired","lock":"a","owner":"<o&>","principal":"","mode":"shared","fencing_token":7,"hold_count":0,"queue_length":0,"session":"s","time":"2026-11-23T17:00:00.999Z"}`
	b, err := event.Marshal(e)
	if err != nil || string(b) != want {
		t.Fatalf("Marshal = %s, %v\nwant %s", b, err, want)
	}

	t.Run("JSONMarshal", func(t *testing.T) {
		// The same JSON value; encoding/json escapes HTML characters.
		var a, b any
		j, _ := json.Marshal(e)
		_ = json.Unmarshal(j, &a)
		_ = json.Unmarshal([]byte(want), &b)
		if ja, jb := must(json.Marshal(a)), must(json.Marshal(b)); string(ja) != string(jb) {
			t.Errorf("json.Marshal = %s", j)
		}
	})

	t.Run("RoundTrip", func(t *testing.T) {
		var got event.Event
		if err := json.Unmarshal([]byte(want), &got); err != nil {
			t.Fatal(err)
		}
		if again := must(event.Marshal(got)); string(again) != want {
			t.Errorf("written again: %s", again)
		}
	})

	t.Run("UnknownMembers", func(t *testing.T) {
		// A reader takes an event of a later server, with members it does
		// not know; an absent time is the zero time.
		var got event.Event
		if err := json.Unmarshal([]byte(`{"id":"2-0","type":"updated","colour":5}`), &got); err != nil {
			t.Fatal(err)
		}
		if got.ID != "2-0" || got.Type != "updated" || !got.Time.IsZero() || got.QueueLength != nil {
			t.Errorf("event %+v", got)
		}
	})

	t.Run("BadTime", func(t *testing.T) {
		var got event.Event
		if err := json.Unmarshal([]byte(`{"id":"2-0","time":"yesterday"}`), &got); err == nil {
			t.Errorf("time yesterday: %+v, want an error", got)
		}
	})
}

// An updated event always carries its metadata, {} for none, before the
// time; other types carry none.
func TestMarshal_UpdatedMetadata(t *testing.T) {
	at := time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		e    event.Event
		want string
	}{
		{event.Event{ID: "1-0", Type: event.Updated, Metadata: map[string]string{"addr": "<a&b>"}, Time: at},
			`{"id":"1-0","type":"updated","lock":"","owner":"","principal":"","mode":"","fencing_token":0,"hold_count":0,"metadata":{"addr":"<a&b>"},"time":"2026-11-23T17:00:00.000Z"}`},
		{event.Event{ID: "1-1", Type: event.Updated, Time: at},
			`{"id":"1-1","type":"updated","lock":"","owner":"","principal":"","mode":"","fencing_token":0,"hold_count":0,"metadata":{},"time":"2026-11-23T17:00:00.000Z"}`},
		{event.Event{ID: "1-2", Type: event.Renewed, Time: at},
			`{"id":"1-2","type":"renewed","lock":"","owner":"","principal":"","mode":"","fencing_token":0,"hold_count":0,"time":"2026-11-23T17:00:00.000Z"}`},
	} {
		b, err := event.Marshal(c.e)
		if err != nil || string(b) != c.want {
			t.Errorf("Marshal = %s, %v\nwant %s", b, err, c.want)
			continue
		}
		var back event.Event
		if err := json.Unmarshal(b, &back); err != nil || len(back.Metadata) != len(c.e.Metadata) || back.Metadata["addr"] != c.e.Metadata["addr"] {
			t.Errorf("read back %+v, %v", back, err)
		}
	}
}

func TestParseType(t *testing.T) {
	for _, typ := range event.Types {
		if got, ok := event.ParseType(string(typ)); !ok || got != typ {
			t.Errorf("ParseType(%q) = %q, %v", typ, got, ok)
		}
	}
	if _, ok := event.ParseType("ping"); ok {
		t.Error("ParseType(ping) is a type")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
