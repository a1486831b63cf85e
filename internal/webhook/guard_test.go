package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lockapi/lockapi/internal/webhook"
)

func TestClassify(t *testing.T) {
	refused := map[string]string{
		"127.0.0.1":        "loopback",
		"127.255.0.9":      "loopback",
		"::1":              "loopback",
		"10.0.0.1":         "private",
		"10.255.255.255":   "private",
		"172.16.0.1":       "private",
		"172.31.255.254":   "private",
		"192.168.1.1":      "private",
		"169.254.169.254":  "link-local", // cloud metadata
		"fc00::1":          "private",
		"fdff:ffff::1":     "private",
		"fe80::1":          "link-local",
		"febf::1":          "link-local",
		"0.0.0.0":          "unspecified",
		"::":               "unspecified",
		"100.64.0.1":       "shared (carrier-grade NAT)",
		"224.0.0.1":        "multicast",
		"255.255.255.255":  "non-unicast",
		"::ffff:127.0.0.1": "loopback", // IPv4-mapped
		"::ffff:10.1.2.3":  "private",
		"64:ff9b::7f00:1":  "loopback (embedded in IPv6)", // NAT64 of 127.0.0.1
		"2002:a00:1::1":    "private (embedded in IPv6)",  // 6to4 of 10.0.0.1
		"::127.0.0.1":      "IPv4-compatible (deprecated)",
		"::8.8.8.8":        "IPv4-compatible (deprecated)",
		"::ffff:0:7f00:1":  "IPv4-translated", // SIIT of 127.0.0.1
		"::ffff:0:808:808": "IPv4-translated",
		"2001:db8::1":      "documentation",
		"2001:db8:ffff::1": "documentation",
		"3fff::1":          "documentation",
		"192.0.2.1":        "documentation",
		"198.51.100.7":     "documentation",
		"203.0.113.200":    "documentation",
	}
	for addr, want := range refused {
		if got := webhook.Classify(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Classify(%s) = %q, want %q", addr, got, want)
		}
	}
	for _, addr := range []string{"1.1.1.1", "8.8.8.8", "172.32.0.1", "172.15.255.255", "192.169.0.1", "2606:4700::1111", "64:ff9b::808:808"} {
		if got := webhook.Classify(netip.MustParseAddr(addr)); got != "" {
			t.Errorf("Classify(%s) = %q, want allowed", addr, got)
		}
	}
}

// fakeDNS answers every look-up with its addresses.
type fakeDNS map[string][]netip.Addr

func (f fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func TestPolicy_Resolve(t *testing.T) {
	dns := fakeDNS{
		"public.example":   addrs("93.184.216.34"),
		"loop.example":     addrs("127.0.0.1"),
		"mixed.example":    addrs("93.184.216.34", "10.0.0.7"), // every address is checked
		"private6.example": addrs("fd00::5"),
	}
	p := webhook.Policy{Resolver: dns}
	ctx := context.Background()
	if got, err := p.Resolve(ctx, "ip", "public.example"); err != nil || len(got) != 1 {
		t.Fatalf("public: %v %v", got, err)
	}
	for _, host := range []string{"loop.example", "mixed.example", "private6.example", "localhost", "LOCALHOST.", "app.localhost", "127.0.0.1", "[::1]", "169.254.169.254", "[::127.0.0.1]", "[2001:db8::1]"} {
		_, err := p.Resolve(ctx, "ip", host)
		if _, ok := errors.AsType[*webhook.RefusedError](err); !ok {
			t.Errorf("Resolve(%s): %v, want a RefusedError", host, err)
		}
	}
	if _, err := p.Resolve(ctx, "ip", "nowhere.example"); err == nil {
		t.Error("an unresolvable host resolved")
	}
	// A hostname resolving to loopback through the system resolver.
	if _, err := (webhook.Policy{}).Resolve(ctx, "ip", "localhost"); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("system localhost: %v", err)
	}
	allow := webhook.Policy{AllowPrivate: true, Resolver: dns}
	if _, err := allow.Resolve(ctx, "ip", "loop.example"); err != nil {
		t.Errorf("AllowPrivate refused loopback: %v", err)
	}
}

// TestDelivery_refuses_private_destinations: a delivery dials only checked
// addresses. The receiver runs on 127.0.0.1, which a name resolves to: the
// default policy never reaches it, AllowPrivate does.
func TestDelivery_refuses_private_destinations(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	dns := fakeDNS{"rebind.example": addrs("127.0.0.1")}

	for _, u := range []string{"https://rebind.example" + port + "/hook", "https://127.0.0.1" + port + "/hook", "https://[::1]" + port + "/"} {
		a := webhook.SendOnce(webhook.Policy{Resolver: dns}, u)
		if a.Outcome != webhook.OutcomeRefused || a.OK() {
			t.Errorf("%s: %+v, want refused", u, a)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the receiver got %d requests", n)
	}
	a := webhook.SendOnce(webhook.Policy{AllowPrivate: true, Resolver: dns}, "http://rebind.example"+port+"/hook")
	if !a.OK() || hits.Load() != 1 {
		t.Fatalf("with AllowPrivate: %+v, %d hits", a, hits.Load())
	}
}

func TestDelivery_follows_no_redirect(t *testing.T) {
	var final atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/hook", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/final", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/final", func(w http.ResponseWriter, r *http.Request) { final.Add(1) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	a := webhook.SendOnce(webhook.Policy{AllowPrivate: true}, srv.URL+"/hook")
	if a.OK() || a.Outcome != webhook.OutcomeRejected || a.Status != http.StatusTemporaryRedirect || final.Load() != 0 {
		t.Fatalf("redirect: %+v, final hit %d times", a, final.Load())
	}
}
