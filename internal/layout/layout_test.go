package layout_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/layout"
)

// A Reporter counts every unknown layout and logs the first of each kind.
func TestReporter_logs_once_per_kind_counts_each(t *testing.T) {
	var log bytes.Buffer
	counts := map[layout.Kind]int{}
	r := layout.NewReporter(zerolog.New(&log), func(k layout.Kind) { counts[k]++ })
	r.Unknown(layout.Events, "3", "1-0")
	r.Unknown(layout.Events, "3", "2-0")
	r.Unknown(layout.Sessions, "2", "s")
	r.Unknown(layout.Events, "4", "3-0")
	if counts[layout.Events] != 3 || counts[layout.Sessions] != 1 {
		t.Errorf("counted %v, want events 3, sessions 1", counts)
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"kind":"events"`) || !strings.Contains(lines[0], `"at":"1-0"`) ||
		!strings.Contains(lines[1], `"kind":"sessions"`) {
		t.Errorf("logged:\n%s\nwant one line for events (the first), one for sessions", log.String())
	}
	var nilReporter *layout.Reporter
	nilReporter.Unknown(layout.Events, "3", "x") // does nothing
	layout.Unknown(nil).Tell(layout.Events, "3", "x")
}

func TestPlain(t *testing.T) {
	for v, want := range map[string]bool{"1": true, "2.1-beta_x": true, "": false, "a\nb": false, "x y": false, strings.Repeat("9", 17): false} {
		if got := layout.Plain(v); got != want {
			t.Errorf("Plain(%q) = %v, want %v", v, got, want)
		}
	}
}
