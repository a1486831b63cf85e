package redlock

import (
	"slices"
	"testing"
)

func TestMasterURLs(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want []string
	}{
		{"redis://a:1,b:2,c:3/0", []string{"redis://a:1/0", "redis://b:2/0", "redis://c:3/0"}},
		{"rediss://u:p@a:1/2?addr=b:2&addr=c:3&dial_timeout=1s", []string{"rediss://u:p@a:1/2?dial_timeout=1s", "rediss://u:p@b:2/2?dial_timeout=1s", "rediss://u:p@c:3/2?dial_timeout=1s"}},
		{"redis://a:1,b:2,c:3,d:4,e:5", []string{"redis://a:1", "redis://b:2", "redis://c:3", "redis://d:4", "redis://e:5"}},
	} {
		got, err := MasterURLs(c.raw)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("MasterURLs(%q) = %q, %v; want %q", c.raw, got, err, c.want)
		}
	}
	for _, bad := range []string{
		"redis://a:1", "redis://a:1,b:2", "redis://a:1,b:2,c:3,d:4", "redis://a:1,a:1,b:2",
		"http://a:1,b:2,c:3", "redis://a:1/0?addr=b:2",
	} {
		if got, err := MasterURLs(bad); err == nil {
			t.Errorf("MasterURLs(%q) = %q, want an error", bad, got)
		}
	}
}
