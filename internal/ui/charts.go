package ui

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockapi/lockapi/event"
	lockhttp "github.com/lockapi/lockapi/internal/http"
)

// The charts are inline SVG that the server draws: no script, no external
// asset, and with a text alternative each (a <title> per mark, and the
// numbers in a table beside it).

// bar is one mark of a chart: a rect and what it stands for.
type bar struct {
	X, Y, W, H int
	Class      string
	Title      string
	Token      uint64 // a lease's, on the timeline
}

// activityChart is the Activity page's chart: grants, expiries and force
// releases per minute.
type activityChart struct {
	Width, Height int
	Bars          []bar
	// Max is the largest count, the chart's top; From and To label the
	// first and last minute.
	Max      int
	From, To string
	// Minutes are the numbers, for the table beside the chart.
	Minutes []lockhttp.StatsMinute
}

// Geometry of the activity chart: a slot of 12 px a minute, three bars of
// 3 px in it, and 20 px under the bars for the labels.
const (
	chartSlot   = 12
	chartBar    = 3
	chartHeight = 160
	chartAxis   = 20
)

func newActivityChart(mins []lockhttp.StatsMinute) activityChart {
	c := activityChart{Width: len(mins) * chartSlot, Height: chartHeight, Max: 1, Minutes: mins}
	for _, m := range mins {
		c.Max = max(c.Max, m.Grants, m.Expiries, m.ForceReleases)
	}
	if len(mins) > 0 {
		c.From, c.To = minuteLabel(mins[0].At), minuteLabel(mins[len(mins)-1].At)
	}
	top := chartHeight - chartAxis - 4
	for i, m := range mins {
		for j, s := range []struct {
			n     int
			class string
			what  string
		}{{m.Grants, "grants", "grants"}, {m.Expiries, "expiries", "expiries"}, {m.ForceReleases, "forced", "force releases"}} {
			if s.n == 0 {
				continue
			}
			h := max(s.n*top/c.Max, 1)
			c.Bars = append(c.Bars, bar{X: i*chartSlot + 1 + j*chartBar, Y: chartHeight - chartAxis - h, W: chartBar, H: h, Class: s.class,
				Title: fmt.Sprintf("%s: %d %s", minuteLabel(m.At), s.n, s.what)})
		}
	}
	return c
}

// minuteLabel writes an API time as the minute it starts, HH:MM UTC.
func minuteLabel(at string) string {
	t, err := event.ParseTime(at)
	if err != nil {
		return at
	}
	return t.UTC().Format("15:04")
}

// sparkline is a hot lock's grants per minute as polyline points in a box
// of sparkWidth by sparkHeight, and its text alternative.
func sparkline(counts []int) (points, title string) {
	if len(counts) == 0 {
		return "", ""
	}
	most := slices.Max(counts)
	var b strings.Builder
	step := float64(sparkWidth) / float64(max(len(counts)-1, 1))
	for i, n := range counts {
		y := float64(sparkHeight - 1)
		if most > 0 {
			y -= float64(n) / float64(most) * float64(sparkHeight-2)
		}
		fmt.Fprintf(&b, "%.1f,%.1f ", float64(i)*step, y)
	}
	return strings.TrimSpace(b.String()), fmt.Sprintf("grants per minute, oldest first: %s", strings.Trim(fmt.Sprint(counts), "[]"))
}

const (
	sparkWidth  = 120
	sparkHeight = 24
)

// timeline is a lock page's Gantt of the lock's recent leases: a row per
// owner, a bar per lease from its grant to its end (or now), coloured by
// how it ended.
type timeline struct {
	Width, Height int
	Rows          []timelineRow
	// Bars are the leases, oldest first.
	Bars     []bar
	From, To string
	// Leases are the numbers, for the table beside the chart, newest first.
	Leases []lockhttp.HistoryLease
}

type timelineRow struct {
	Owner string
	Y     int
}

// Geometry of the timeline: owners' names on the left, a row of 22 px each.
const (
	timelineLabel = 140
	timelinePlot  = 600
	timelineRowH  = 22
	timelineBarH  = 14
)

func newTimeline(leases []lockhttp.HistoryLease, now time.Time) *timeline {
	if len(leases) == 0 {
		return nil
	}
	tl := &timeline{Width: timelineLabel + timelinePlot + 10, Leases: leases}
	type span struct {
		l          lockhttp.HistoryLease
		from, to   time.Time
		cut, alive bool
	}
	spans := make([]span, 0, len(leases))
	start := now
	for _, l := range leases {
		sp := span{l: l, to: now, alive: l.EndedAt == ""}
		if t, err := event.ParseTime(l.EndedAt); err == nil {
			sp.to = t
		}
		if t, err := event.ParseTime(l.AcquiredAt); err == nil {
			sp.from = t
		} else {
			sp.cut = true
		}
		if !sp.cut && sp.from.Before(start) {
			start = sp.from
		}
		if sp.to.Before(start) {
			start = sp.to
		}
		spans = append(spans, sp)
	}
	// The chart ends now while a lease lives, else at the last end.
	if !slices.ContainsFunc(spans, func(sp span) bool { return sp.alive }) {
		now = slices.MaxFunc(spans, func(a, b span) int { return a.to.Compare(b.to) }).to
	}
	// Oldest first: by fencing token, which rises with every grant.
	slices.SortStableFunc(spans, func(a, b span) int { return cmp.Compare(a.l.FencingToken, b.l.FencingToken) })
	total := max(now.Sub(start), time.Millisecond)
	x := func(t time.Time) int {
		return timelineLabel + int(float64(timelinePlot)*float64(t.Sub(start))/float64(total))
	}
	rows := map[string]int{}
	for _, sp := range spans {
		row, ok := rows[sp.l.Owner]
		if !ok {
			row = len(rows)
			rows[sp.l.Owner] = row
			tl.Rows = append(tl.Rows, timelineRow{Owner: sp.l.Owner, Y: row*timelineRowH + timelineRowH/2 + 4})
		}
		x0 := timelineLabel
		if !sp.cut {
			x0 = x(sp.from)
		}
		class := sp.l.EndedBy
		if sp.alive {
			class = "live"
		}
		tl.Bars = append(tl.Bars, bar{X: x0, Y: row*timelineRowH + (timelineRowH-timelineBarH)/2, W: max(x(sp.to)-x0, 2), H: timelineBarH,
			Class: class, Title: leaseTitle(sp.l), Token: sp.l.FencingToken})
	}
	tl.Height = len(rows)*timelineRowH + chartAxis
	tl.From, tl.To = start.UTC().Format("15:04:05"), now.UTC().Format("15:04:05")
	return tl
}

// leaseTitle is what a timeline's bar says on hover, and to a screen
// reader.
func leaseTitle(l lockhttp.HistoryLease) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, fencing token %d", l.Owner, l.FencingToken)
	if l.WaitedMs != nil {
		fmt.Fprintf(&b, ", waited %s", formatMs(*l.WaitedMs))
	}
	if l.HeldMs != nil {
		fmt.Fprintf(&b, ", held %s", formatMs(*l.HeldMs))
	}
	if l.EndedBy == "" {
		b.WriteString(", holding now")
	} else {
		b.WriteString(", " + strings.ReplaceAll(l.EndedBy, "_", " "))
	}
	return b.String()
}

// formatMs writes a duration of ms milliseconds for people.
func formatMs(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).String()
}
