package http

import (
	"context"
	"net/http"
	"strings"

	"github.com/lockapi/lockapi"
	"github.com/lockapi/lockapi/internal/lock"
)

// handleHealth handles the "GET /healthz" route: the process serves HTTP.
// It does not touch the store.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, r, http.StatusOK, Status{Status: "ok"})
}

// handleReady handles the "GET /readyz" route: the store answers a ping,
// and the server is not shutting down.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.closing.Err() != nil {
		Error(w, r, errShuttingDown)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		Error(w, r, lock.Unavailable(err))
		return
	}
	writeJSON(w, r, http.StatusOK, Status{Status: "ready"})
}

// handleOpenAPI handles the "GET /openapi.yaml" route: the API's contract.
// It is application/yaml, or text/plain for a client that accepts only
// that: many generators (openapi-python-client among them) read no YAML
// media type and would decode the text as JSON, so the spec offers both.
func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	ct := "application/yaml"
	if accept := r.Header.Get("Accept"); strings.Contains(accept, "text/plain") && !strings.Contains(accept, "yaml") {
		ct = "text/plain; charset=utf-8"
	}
	writeDocument(w, ct, lockapi.OpenAPI)
}

// handleOpenAPIJSON handles the "GET /openapi.json" route: the same
// contract as JSON, for tools that read no YAML.
func (s *Server) handleOpenAPIJSON(w http.ResponseWriter, r *http.Request) {
	writeDocument(w, "application/json", lockapi.OpenAPIJSON())
}

func writeDocument(w http.ResponseWriter, contentType string, doc []byte) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(doc)
}
