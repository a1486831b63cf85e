package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/lockapi/lockapi/client"
	"github.com/lockapi/lockapi/client/api"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/testkit/apitest"
)

func TestInspect(t *testing.T) {
	ForEachStore(t, lockhttp.Config{}, func(t *testing.T, e *Env) {
		ctx := context.Background()

		t.Run("OK_never_acquired", func(t *testing.T) {
			st, err := e.Client.Inspect(ctx, "fresh")
			if err != nil {
				t.Fatal(err)
			}
			if st.Lock != "fresh" || st.Held || st.Mode != "" || st.Holder != nil || len(st.Holders) != 0 || st.LastToken != 0 || st.Index == "" {
				t.Fatalf("state %+v", st)
			}
		})

		t.Run("OK_exclusive", func(t *testing.T) {
			l := e.MustAcquire("job", client.AcquireOptions{Owner: "worker-7", TTL: time.Minute, Metadata: map[string]string{"commit": "4f2a9c1"}})
			st, err := e.Client.Inspect(ctx, "job")
			if err != nil {
				t.Fatal(err)
			}
			h := st.Holder
			if !st.Held || st.Mode != client.ModeExclusive || h == nil || len(st.Holders) != 1 || st.LastToken != l.Token() {
				t.Fatalf("state %+v", st)
			}
			if h.Owner != "worker-7" || h.Shared || h.Token != l.Token() || h.HoldCount != 1 || h.Metadata["commit"] != "4f2a9c1" {
				t.Fatalf("holder %+v, lease token %d", h, l.Token())
			}
			if left := time.Until(h.ExpiresAt); h.AcquiredAt.IsZero() || left <= 0 || left > time.Minute+time.Second {
				t.Fatalf("acquired %v, expires %v (in %v)", h.AcquiredAt, h.ExpiresAt, left)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			st, err = e.Client.Inspect(ctx, "job")
			if err != nil || st.Held || st.Holder != nil || st.LastToken != l.Token() {
				t.Fatalf("after the release: %+v, %v", st, err)
			}
		})

		t.Run("OK_readers", func(t *testing.T) {
			e.MustAcquire("rw", client.AcquireOptions{Owner: "r1", Shared: true})
			e.MustAcquire("rw", client.AcquireOptions{Owner: "r2", Shared: true})
			st, err := e.Client.Inspect(ctx, "rw")
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode != client.ModeShared || st.Holder != nil || len(st.Holders) != 2 || !st.Holders[0].Shared || st.Holders[1].Owner != "r2" {
				t.Fatalf("state %+v", st)
			}
		})

		t.Run("OK_semaphore", func(t *testing.T) {
			p := e.MustAcquire("sem", client.AcquireOptions{Owner: "p1", Limit: 3})
			st, err := e.Client.Inspect(ctx, "sem")
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode != client.ModeSemaphore || st.Limit != 3 || st.Holder != nil || len(st.Holders) != 1 || st.Holders[0].Token != p.Token() {
				t.Fatalf("state %+v", st)
			}
		})

		// A LockState marshals to what the server answered: nothing of the
		// answer is lost on the way through the typed state.
		t.Run("OK_json_as_the_server_answers", func(t *testing.T) {
			e.MustAcquire("js", client.AcquireOptions{Owner: "w", Metadata: map[string]string{"k": "v"}})
			for _, name := range []string{"js", "rw", "sem", "fresh"} {
				resp, err := e.API.GetLockWithResponse(ctx, name, nil)
				if err != nil || resp.JSON200 == nil {
					t.Fatalf("get %s: %v %v", name, err, resp)
				}
				st, err := e.Client.Inspect(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				got, err := json.Marshal(st)
				if err != nil {
					t.Fatal(err)
				}
				if want := canonical(t, resp.Body); !bytes.Equal(canonical(t, got), want) {
					t.Errorf("%s: marshalled\n%s\nthe server answered\n%s", name, got, resp.Body)
				}
			}
		})
	})
}

// canonical decodes a LockState answer and encodes it again, so that two
// spellings of the same state (time formats, field order) compare equal.
func canonical(t *testing.T, body []byte) []byte {
	t.Helper()
	var st api.LockState
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestInspect_errors(t *testing.T) {
	e := MustOpenMemoryEnv(t, lockhttp.Config{})
	ctx := context.Background()

	t.Run("ErrInvalidName", func(t *testing.T) {
		// The request breaks the contract on purpose: check only the answer.
		c, err := client.New(e.URL, client.WithHTTPClient(apitest.NewClient(t, e.URL)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Inspect(ctx, "bad name")
		var pe *client.ProblemError
		if !errors.As(err, &pe) || pe.Status != 400 || len(pe.Fields) == 0 || pe.Fields[0].Field != "name" {
			t.Fatalf("err %v, want a 400 naming the field", err)
		}
	})

	t.Run("ErrUnavailable", func(t *testing.T) {
		c, err := client.New(DownURL(t))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Inspect(ctx, "job"); !errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("err %v, want ErrUnavailable", err)
		}
	})

	t.Run("ErrCancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := e.Client.Inspect(cctx, "job"); !errors.Is(err, context.Canceled) || errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
	})
}
