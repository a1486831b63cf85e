package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/lockapi/lockapi/internal/auth"
)

// apiError is an answer of the API other than the one a page asked for:
// its problem's status, type (the slug after the base URI) and detail,
// which are safe to show.
type apiError struct {
	Status int
	Type   string
	Detail string
}

func (e *apiError) Error() string { return e.Detail }

// problemTypeBase prefixes the API's problem types.
const problemTypeBase = "https://lockapi.dev/problems/"

// apiCall asks the API, in this process and as the session's key, as the
// live feed does (handleEvents): the page gets what the key would get from
// the API, by the API's rules, and the API counts the request. A 2xx
// answer is decoded into out; any other is an *apiError.
func (h *Handler) apiCall(r *http.Request, s session, method, path string, out any) error {
	// A request of its own, not a clone, as handleEvents': the API routes
	// it afresh, with none of the page's request's context values (its
	// router's state, its request scope), but ends with it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer context.AfterFunc(r.Context(), cancel)()
	req, err := http.NewRequestWithContext(ctx, method, path, nil)
	if err != nil {
		return &apiError{Status: http.StatusBadRequest, Type: "invalid-request", Detail: "bad request"}
	}
	req.RemoteAddr, req.TLS, req.Host = r.RemoteAddr, r.TLS, r.Host
	req.Header.Set("Accept", "application/json")
	if s.key != nil {
		req = req.WithContext(auth.WithKey(req.Context(), s.key))
	}
	w := &answer{header: http.Header{}, status: http.StatusOK}
	h.api.ServeHTTP(w, req)
	if w.status/100 != 2 {
		var p struct {
			Type   string `json:"type"`
			Detail string `json:"detail"`
		}
		_ = json.Unmarshal(w.body.Bytes(), &p)
		if p.Detail == "" {
			p.Detail = fmt.Sprintf("the API answered %d", w.status)
		}
		return &apiError{Status: w.status, Type: strings.TrimPrefix(p.Type, problemTypeBase), Detail: p.Detail}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(w.body.Bytes(), out)
}

// answer is an http.ResponseWriter that keeps the answer.
type answer struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

func (a *answer) Header() http.Header { return a.header }

func (a *answer) WriteHeader(status int) {
	if !a.wrote {
		a.status, a.wrote = status, true
	}
}

func (a *answer) Write(p []byte) (int, error) {
	a.wrote = true
	return a.body.Write(p)
}

// failAPI answers a page whose API call failed with the API's status and
// detail.
func (h *Handler) failAPI(w http.ResponseWriter, r *http.Request, err error) {
	if e, ok := err.(*apiError); ok {
		h.fail(w, r, e.Status, e.Detail)
		return
	}
	h.fail(w, r, http.StatusInternalServerError, "The API's answer could not be read.")
}
