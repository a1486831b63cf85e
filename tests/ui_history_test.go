package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
)

// screenshotsEnv names the folder TestUI_history saves screenshots of the
// Activity page, a lock's timeline and the Sessions page to, when set:
// docs/dashboard-*.png are made with
//
//	LOCKAPI_UI_SCREENSHOTS=$PWD/docs go test ./tests -run TestUI_history
const screenshotsEnv = "LOCKAPI_UI_SCREENSHOTS"

// TestUI_history drives the Activity, timeline and Sessions pages in one
// headless Chromium session, after a scripted run of three locks: "hot",
// granted five times, once to a waiter; "flaky", whose holder (principal
// batch) lets two leases expire; and "jobs:nightly", held through a
// session. The Activity page lists hot first and names batch; hot's
// timeline has a bar per lease, in token order; the Sessions page lists
// the session, and ending it there frees its lease.
func TestUI_history(t *testing.T) {
	chromium := lookChromium(t)
	adminKey, adminLine := uiKey(t, "ops", auth.ScopeAdmin)
	batchKey, batchLine := uiKey(t, "batch", auth.ScopeWrite)
	s := startServer(t, []string{"LOCKAPI_API_KEYS=" + adminLine + ";" + batchLine})

	tokens := scriptHistory(t, s, adminKey, batchKey)
	var sess struct {
		SessionID string `json:"session_id"`
	}
	uiCall(t, s, adminKey, "POST", "/v1/sessions", map[string]any{"owner": "nightly-runner", "ttl_ms": 60000}, &sess)
	uiGrant(t, s, adminKey, "jobs:nightly", map[string]any{"owner": "nightly-runner", "session": sess.SessionID})

	b := startBrowser(t, chromium)
	b.run("sign in as the admin", signIn(s.URL, adminKey)...)
	shots := os.Getenv(screenshotsEnv)

	b.run("open Activity", chromedp.Navigate(s.URL+"/ui/activity"), chromedp.WaitVisible(chromedp.CSS(`#hot-locks`)))
	first := get(b, "read the hot locks", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#hot-locks tbody tr[data-lock]')].map(tr => tr.dataset.lock)`))
	expiring := get(b, "read the expiring principals", chromedp.Evaluate[string](`document.querySelector('#expiring tbody tr[data-principal]')?.dataset.principal ?? ''`))
	bars := get(b, "count the chart's bars", chromedp.Evaluate[int](`document.querySelectorAll('#activity-chart svg rect').length`))
	if len(first) < 2 || first[0] != "hot" || expiring != "batch" || bars == 0 {
		t.Fatalf("Activity: hot locks %q, expiring %q, %d bars", first, expiring, bars)
	}
	if shots != "" {
		b.shoot(filepath.Join(shots, "dashboard-activity.png"))
	}

	b.run("open hot's page", chromedp.Navigate(s.URL+"/ui/locks/hot"), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	drawn := get(b, "read the timeline", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#timeline svg rect.lease')].map(r => r.dataset.token)`))
	if want := tokens; !slices.Equal(drawn, want) {
		t.Fatalf("timeline bars by token: %q, want %q (oldest first)", drawn, want)
	}
	title := get(b, "read a bar's title", chromedp.Evaluate[string](`document.querySelector('#timeline svg rect.lease:nth-of-type(2) title')?.textContent ?? ''`))
	if !strings.Contains(title, "fencing token") || !strings.Contains(title, "waited") {
		t.Errorf("a bar's title: %q", title)
	}
	if shots != "" {
		b.shoot(filepath.Join(shots, "dashboard-timeline.png"))
	}

	b.run("open Sessions", chromedp.Navigate(s.URL+"/ui/sessions"), chromedp.WaitVisible(chromedp.CSS(`#sessions`)))
	row := fmt.Sprintf(`#sessions tr[data-session="%s"]`, sess.SessionID)
	cells := get(b, "read the session", chromedp.Evaluate[[]string](fmt.Sprintf(`[...document.querySelectorAll('%s td')].map(td => td.textContent.trim())`, row)))
	if len(cells) != 7 || cells[1] != "nightly-runner" || cells[2] != "ops" || !strings.Contains(cells[5], "jobs:nightly") {
		t.Fatalf("session row: %q", cells)
	}
	if shots != "" {
		b.shoot(filepath.Join(shots, "dashboard-sessions.png"))
	}
	b.run("end the session", chromedp.Click(chromedp.CSS(row+` form.end-session button`)), chromedp.WaitVisible(chromedp.CSS(`.notice`)))
	if present := get(b, "look for the row", chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector('%s') !== null`, row))); present {
		t.Fatal("the ended session is still listed")
	}
	if st := uiState(t, s, adminKey, "jobs:nightly"); st.Held {
		t.Fatalf("the session's lease lives on: %+v", st)
	}
	// Counted as the API's DELETE /v1/sessions/{id} is: it is that request.
	if got := scrape(t, newAPI(t, s))[`lockapi_http_requests_total{method="DELETE",route="/v1/sessions/{id}",status="200"}`]; got != 1 {
		t.Errorf("DELETE /v1/sessions/{id} counted %v times after the dashboard ended a session, want 1", got)
	}
	b.checkConsole()
}

// scriptHistory makes hot's five leases (the second granted to a waiter)
// and flaky's two expired ones, waits until the server's stats show them,
// and returns hot's fencing tokens, oldest first.
func scriptHistory(t *testing.T, s *server, adminKey, batchKey string) []string {
	t.Helper()
	release := func(l Lease) {
		var out map[string]any
		uiCall(t, s, adminKey, "DELETE", "/v1/locks/"+l.Lock+"/leases/"+l.LeaseID, nil, &out)
	}
	first := uiGrant(t, s, adminKey, "hot", map[string]any{"owner": "web-1", "ttl_ms": 30000})
	waited := make(chan Lease, 1)
	go func() {
		var l Lease
		req, _ := http.NewRequest("POST", s.URL+"/v1/locks/hot/leases", strings.NewReader(`{"owner": "web-2", "fair": true, "wait_ms": 20000}`))
		req.Header.Set("Authorization", "Bearer "+adminKey)
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&l)
			resp.Body.Close()
		}
		waited <- l
	}()
	deadline := time.Now().Add(10 * time.Second)
	for uiQueue(t, s, adminKey, "hot") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never queued")
		}
		time.Sleep(10 * time.Millisecond)
	}
	release(first)
	leases := []Lease{first, <-waited}
	if leases[1].LeaseID == "" {
		t.Fatal("the waiter was not granted hot")
	}
	release(leases[1])
	for _, owner := range []string{"web-3", "web-1", "web-2"} {
		l := uiGrant(t, s, adminKey, "hot", map[string]any{"owner": owner})
		release(l)
		leases = append(leases, l)
	}
	// batch's leases expire: the second waits out the first.
	uiGrant(t, s, batchKey, "flaky", map[string]any{"owner": "cron-1", "ttl_ms": 300})
	uiGrant(t, s, batchKey, "flaky", map[string]any{"owner": "cron-2", "ttl_ms": 300, "wait_ms": 5000})
	deadline = time.Now().Add(10 * time.Second)
	for {
		var st lockhttp.LocksStats
		uiCall(t, s, adminKey, "GET", "/v1/stats/locks?window=5m&sort=expiries", nil, &st)
		if len(st.Locks) == 2 && st.Locks[0].Lock == "flaky" && st.Locks[0].Expiries == 2 && st.Locks[1].Grants == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stats never showed the run: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	tokens := make([]string, len(leases))
	for i, l := range leases {
		tokens[i] = fmt.Sprint(l.FencingToken)
	}
	return tokens
}

// uiQueue is the lock's queue length.
func uiQueue(t *testing.T, s *server, key, name string) int {
	t.Helper()
	var st struct {
		QueueLength int `json:"queue_length"`
	}
	uiCall(t, s, key, "GET", "/v1/locks/"+name, nil, &st)
	return st.QueueLength
}

// shoot saves a screenshot of the page to path.
func (b *browser) shoot(path string) {
	b.t.Helper()
	png := get(b, "screenshot", chromedp.Screenshot(chromedp.CSS("body")))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot saved to %s", filepath.Clean(path))
}
