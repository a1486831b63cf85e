package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Policy decides which destinations deliveries may reach. By default only
// https URLs on public addresses: a subscription must not make lockapi
// reach into the network it runs in (SSRF) — its Redis, a cloud metadata
// endpoint, an admin port on localhost.
//
// A host name is checked each time a delivery dials it: every address it
// resolves to must be allowed, and the connection goes to an address that
// was checked, so a name that resolves to a public address when the
// subscription is created and to a private one later (DNS rebinding) gets
// nowhere.
type Policy struct {
	// AllowPrivate lets deliveries reach loopback, link-local and private
	// addresses, and use http (LOCKAPI_WEBHOOKS_ALLOW_PRIVATE=true): for
	// receivers in the same network, and for tests.
	AllowPrivate bool
	// Resolver looks host names up; nil is net.DefaultResolver.
	Resolver Resolver
}

// Resolver is what Policy needs of a DNS resolver (net.Resolver has it).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// RefusedError says why a destination address is not allowed.
type RefusedError struct {
	Host string
	Addr netip.Addr
	Kind string // "loopback", "private", ...
}

func (e *RefusedError) Error() string {
	what := fmt.Sprintf("%s is a %s address", e.Addr, e.Kind)
	if e.Host != e.Addr.String() {
		what = fmt.Sprintf("%s resolves to %s, a %s address", e.Host, e.Addr, e.Kind)
	}
	return what + ": refused (LOCKAPI_WEBHOOKS_ALLOW_PRIVATE=true allows it)"
}

// specialPrefixes are ranges that netip's predicates do not cover and that
// no public receiver lives in.
var specialPrefixes = []struct {
	prefix netip.Prefix
	kind   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (carrier-grade NAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("3fff::/20"), "documentation"},
	// IPv4-compatible addresses (::a.b.c.d, RFC 4291, deprecated): a
	// system may still route ::127.0.0.1 to 127.0.0.1.
	{netip.MustParsePrefix("::/96"), "IPv4-compatible (deprecated)"},
	// IPv4-translated addresses (::ffff:0:a.b.c.d, RFC 2765, SIIT): a
	// translator may carry ::ffff:0:7f00:1 to 127.0.0.1. Their prefix is
	// ::ffff:0:0:0/96; ::ffff:0:0/96 is IPv4-mapped, which Unmap reads
	// as the IPv4 address it is.
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "IPv4-translated"},
}

// Ranges that carry an IPv4 address inside an IPv6 one: the embedded
// address is checked too, so that 64:ff9b::7f00:1 is not a way to 127.0.0.1.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	nat64Loc  = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// Classify returns the kind of a refused address, "" for an allowed one
// (a public unicast address).
func Classify(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast():
		return "multicast"
	case a.IsPrivate():
		return "private"
	case !a.IsGlobalUnicast():
		return "non-unicast"
	}
	for _, s := range specialPrefixes {
		if s.prefix.Contains(a) {
			return s.kind
		}
	}
	if a.Is6() {
		b := a.As16()
		var v4 netip.Addr
		switch {
		case nat64.Contains(a), nat64Loc.Contains(a):
			v4 = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		case sixToFour.Contains(a):
			v4 = netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
		}
		if v4.IsValid() {
			if kind := Classify(v4); kind != "" {
				return kind + " (embedded in IPv6)"
			}
		}
	}
	return ""
}

// CheckAddr refuses an address that the policy does not allow.
func (p Policy) CheckAddr(host string, a netip.Addr) error {
	if p.AllowPrivate {
		return nil
	}
	if kind := Classify(a); kind != "" {
		return &RefusedError{Host: host, Addr: a.Unmap(), Kind: kind}
	}
	return nil
}

// CheckHost checks what can be known of a host without resolving it: an IP
// literal must be allowed, and "localhost" (which resolvers answer
// themselves) is loopback.
func (p Policy) CheckHost(host string) error {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return p.CheckAddr(host, a.WithZone(""))
	}
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return p.CheckAddr(host, netip.IPv6Loopback())
	}
	return nil
}

// Resolve returns the addresses of host, each checked: one that is not
// allowed refuses the host.
func (p Policy) Resolve(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if err := p.CheckHost(host); err != nil {
		return nil, err
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{a.WithZone("")}, nil
	}
	r := p.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	addrs, err := r.LookupNetIP(ctx, network, host)
	if err != nil {
		return nil, fmt.Errorf("%s does not resolve: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s resolves to no address", host)
	}
	for _, a := range addrs {
		if err := p.CheckAddr(host, a); err != nil {
			return nil, err
		}
	}
	return addrs, nil
}

// DialContext dials addr (host:port) on an address of host that Resolve
// checked, trying each in turn: the transport of every delivery dials
// through it.
func (p Policy) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ipNet := "ip"
	switch network {
	case "tcp4":
		ipNet = "ip4"
	case "tcp6":
		ipNet = "ip6"
	}
	addrs, err := p.Resolve(ctx, ipNet, host)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	var errs []error
	for _, a := range addrs {
		conn, err := d.DialContext(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}
