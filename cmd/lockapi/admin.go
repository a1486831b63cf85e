package main

import (
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/lockapi/lockapi/internal/metrics"
)

// openAdmin serves pprof (and /metrics, when on) on a listener of its own,
// so that profiling is never exposed on the API's address by accident. It is
// off unless LOCKAPI_ADMIN_ADDR is set.
func openAdmin(addr string, m *metrics.Metrics) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	if m != nil {
		mux.Handle("/metrics", m.Handler())
	}
	srv := &http.Server{Addr: ln.Addr().String(), Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return srv, nil
}
