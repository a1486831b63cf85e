package webhook_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/webhook"
)

func TestBackoff_bounds(t *testing.T) {
	b := webhook.Backoff{Min: time.Second, Max: 30 * time.Minute}
	want := time.Second
	for n := 1; n <= 64; n++ {
		if c := b.Ceiling(n); c != want {
			t.Fatalf("Ceiling(%d) = %v, want %v", n, c, want)
		}
		for range 200 {
			if d := b.Delay(n); d < 0 || d >= want {
				t.Fatalf("Delay(%d) = %v, outside [0, %v)", n, d, want)
			}
		}
		want = min(2*want, b.Max)
	}
	// Full jitter spreads the waits over the whole range.
	var lo, hi int
	for range 1000 {
		if d := b.Delay(5); d < 4*time.Second {
			lo++
		} else if d >= 12*time.Second {
			hi++
		}
	}
	if lo < 100 || hi < 100 {
		t.Fatalf("Delay(5) of 16 s ceiling: %d below 4 s, %d above 12 s of 1000: not uniform", lo, hi)
	}
	// A day of retries with the defaults makes dozens of attempts, not
	// thousands.
	var total time.Duration
	n := 0
	for total < 24*time.Hour {
		n++
		total += webhook.DefaultBackoff.Ceiling(n) / 2
	}
	if n < 20 || n > 200 {
		t.Fatalf("a day of retries is %d attempts", n)
	}
}

func TestNormalize(t *testing.T) {
	strict := webhook.Policy{}
	t.Run("OK", func(t *testing.T) {
		sub, err := strict.Normalize("", webhook.Spec{URL: "https://ci.example/hooks?x=1", Prefix: "ci:", Types: []string{"released", "granted", "released"}})
		if err != nil {
			t.Fatal(err)
		}
		if sub.URL != "https://ci.example/hooks?x=1" || sub.Prefix != "ci:" || !slices.Equal(sub.Types, []lock.EventType{"granted", "released"}) {
			t.Fatalf("sub = %+v", sub)
		}
	})
	cases := []struct {
		name   string
		policy webhook.Policy
		spec   webhook.Spec
		field  string
		detail string
	}{
		{"ErrURLRequired", strict, webhook.Spec{}, "url", "required"},
		{"ErrNotHTTPS", strict, webhook.Spec{URL: "http://ci.example/"}, "url", "https"},
		{"ErrScheme", webhook.Policy{AllowPrivate: true}, webhook.Spec{URL: "ftp://ci.example/"}, "url", "https"},
		{"ErrRelative", strict, webhook.Spec{URL: "/hooks"}, "url", "absolute"},
		{"ErrUserInfo", strict, webhook.Spec{URL: "https://u:p@ci.example/"}, "url", "user info"},
		{"ErrLoopback", strict, webhook.Spec{URL: "https://127.0.0.1/"}, "url", "loopback"},
		{"ErrPrivate", strict, webhook.Spec{URL: "https://10.1.2.3:8443/"}, "url", "private"},
		{"ErrLinkLocal6", strict, webhook.Spec{URL: "https://[fe80::1]/"}, "url", "link-local"},
		{"ErrLocalhost", strict, webhook.Spec{URL: "https://localhost/"}, "url", "loopback"},
		{"ErrPrefix", strict, webhook.Spec{URL: "https://ci.example/", Prefix: "ci/*"}, "prefix", "prefix"},
		{"ErrType", strict, webhook.Spec{URL: "https://ci.example/", Types: []string{"released", "freed"}}, "types[1]", "unknown event type"},
		{"ErrPingIsNoLogType", strict, webhook.Spec{URL: "https://ci.example/", Types: []string{"ping"}}, "types[0]", "unknown event type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.policy.Normalize("", c.spec)
			e := lock.AsError(err)
			if e.Code != lock.CodeInvalid || len(e.Fields) == 0 || e.Fields[0].Field != c.field || !strings.Contains(e.Fields[0].Detail, c.detail) {
				t.Fatalf("err = %+v, want %s naming %q with %q", err, lock.CodeInvalid, c.field, c.detail)
			}
		})
	}
	t.Run("AllowPrivate", func(t *testing.T) {
		for _, u := range []string{"http://127.0.0.1:8080/hook", "http://localhost/", "https://10.0.0.1/"} {
			if _, err := (webhook.Policy{AllowPrivate: true}).Normalize("", webhook.Spec{URL: u}); err != nil {
				t.Errorf("%s: %v", u, err)
			}
		}
	})
}

func TestSubscription_Match(t *testing.T) {
	sub := webhook.Subscription{Prefix: "ci:", Types: []lock.EventType{lock.EventReleased}}
	for _, c := range []struct {
		e    lock.Event
		want bool
	}{
		{lock.Event{Lock: "ci:build", Type: lock.EventReleased}, true},
		{lock.Event{Lock: "ci:build", Type: lock.EventGranted}, false},
		{lock.Event{Lock: "deploy", Type: lock.EventReleased}, false},
	} {
		if got := sub.Match(c.e); got != c.want {
			t.Errorf("Match(%+v) = %v", c.e, got)
		}
	}
	// The workers' own leases reach only subscriptions that ask for them.
	own := lock.Event{Lock: webhook.LeaseName("x"), Type: lock.EventRenewed}
	if (webhook.Subscription{}).Match(own) {
		t.Error("a catch-all subscription gets the workers' lease events")
	}
	if !(webhook.Subscription{Prefix: "lockapi.webhook."}).Match(own) {
		t.Error("a subscription to lockapi.webhook. misses them")
	}
}

func TestParseFile(t *testing.T) {
	secret := webhook.NewSecret()
	good := `{"webhooks": [
		{"id": "ci-next", "url": "https://ci.example/hooks", "prefix": "ci:", "types": ["released"], "secrets": ["` + secret + `"]},
		{"id": "all", "url": "https://audit.example/in", "secrets": ["` + secret + `", "` + webhook.NewSecret() + `"]}
	]}`
	subs, err := webhook.ParseFile([]byte(good), webhook.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 2 || subs[0].ID != "ci-next" || subs[0].Source != webhook.SourceFile || len(subs[1].Secrets) != 2 {
		t.Fatalf("subs = %+v", subs)
	}
	bad := `{"webhooks": [
		{"id": "a b", "url": "http://ci.example/", "types": ["freed"], "secrets": []},
		{"id": "dup", "url": "https://x.example/", "secrets": ["whsec_short"]},
		{"id": "dup", "url": "https://x.example/", "secrets": ["` + secret + `"]}
	]}`
	_, err = webhook.ParseFile([]byte(bad), webhook.Policy{})
	if err == nil {
		t.Fatal("a bad file parsed")
	}
	for _, want := range []string{"webhooks[0].id", "webhooks[0].url", "webhooks[0].types[0]", "webhooks[0].secrets", "webhooks[1].secrets[0]", "webhooks[2].id", "webhooks[2].url"} {
		if !strings.Contains(err.Error(), want+":") {
			t.Errorf("error does not name %s:\n%v", want, err)
		}
	}
	if _, err := webhook.ParseFile([]byte(`{"hooks": []}`), webhook.Policy{}); err == nil {
		t.Error("an unknown member parsed")
	}
}
