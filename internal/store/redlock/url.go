package redlock

import (
	"fmt"
	"net/url"
	"strings"
)

// MasterURLs splits a redlock URL into one redis:// (or rediss://) URL per
// master. The masters are named in the host, comma-separated
// (redis://a:6379,b:6379,c:6379/0), or by repeated addr parameters
// (redis://a:6379/0?addr=b:6379&addr=c:6379), or both; credentials, the
// database and the other parameters apply to every master. Their number
// must be odd and at least 3.
func MasterURLs(raw string) ([]string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("redlock URL: %w", err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("redlock URL: scheme %q, want redis or rediss", u.Scheme)
	}
	var addrs []string
	for _, a := range strings.Split(u.Host, ",") {
		if a != "" {
			addrs = append(addrs, a)
		}
	}
	q := u.Query()
	addrs = append(addrs, q["addr"]...)
	q.Del("addr")
	if n := len(addrs); n < 3 || n%2 == 0 {
		return nil, fmt.Errorf("redlock needs an odd number of independent masters, at least 3; the URL names %d", n)
	}
	seen := map[string]bool{}
	urls := make([]string, len(addrs))
	for i, a := range addrs {
		if seen[a] {
			return nil, fmt.Errorf("redlock URL names the master %s twice", a)
		}
		seen[a] = true
		m := *u
		m.Host = a
		m.RawQuery = q.Encode()
		urls[i] = m.String()
	}
	return urls, nil
}
