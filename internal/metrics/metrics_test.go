package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/metrics"
)

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, err := io.ReadAll(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A method is chosen by the client: methods that RFC 9110 does not define
// all count under one label value, so that no request adds series.
func TestRequest_unknownMethodsAreOther(t *testing.T) {
	m := metrics.New()
	m.Request("/healthz", "GET", 200, time.Millisecond)
	before := strings.Count(scrape(t, m), "\n")
	for i := range 50 {
		m.Request("/healthz", "X"+strings.Repeat("Y", i)+"Z", 200, time.Millisecond)
	}
	m.Request("/healthz", "get", 200, time.Millisecond)
	out := scrape(t, m)
	if strings.Contains(out, "XYZ") || strings.Contains(out, `method="get"`) {
		t.Fatalf("a client's method became a label value:\n%s", out)
	}
	if !strings.Contains(out, `lockapi_http_requests_total{method="other",route="/healthz",status="200"} 51`) {
		t.Fatalf("the unknown methods are not counted as other:\n%s", out)
	}
	// GET's series, then other's: twice as many request lines, no more.
	if after := strings.Count(out, "\n"); after > before+before {
		t.Fatalf("%d lines after 51 unknown methods, %d before", after, before)
	}
	for _, method := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		m.Request("/healthz", method, 200, time.Millisecond)
		if !strings.Contains(scrape(t, m), `method="`+method+`"`) {
			t.Fatalf("method %s is not its own label value", method)
		}
	}
}
