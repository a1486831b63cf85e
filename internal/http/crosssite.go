package http

import (
	"net/http"
)

// crossOrigin is the rule by which a browser's request from another site
// is told apart: the dashboard's too (internal/ui), net/http's own.
var crossOrigin = http.NewCrossOriginProtection()

// refuseCrossSite guards the API's state-changing routes against requests
// that a web page makes a browser send (docs/SECURITY.md): on an open
// server, any page a developer visits could otherwise take or free their
// local locks with a plain HTML form or a no-cors fetch. It refuses, with
// 403 forbidden, a request that the browser marks as cross-origin
// (Sec-Fetch-Site, or an Origin that is not the server's), and with 415 a
// body, or a Content-Type, that is not application/json, which is what a
// form or a no-cors fetch can send without a CORS preflight. A request
// with no body and no Content-Type stays allowed. GET, HEAD and OPTIONS
// change nothing and pass.
func refuseCrossSite(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			next.ServeHTTP(w, r)
			return
		}
		if err := crossOrigin.Check(r); err != nil {
			Error(w, r, &httpError{kindForbidden, "a cross-origin request from a browser may not change locks: " + err.Error()})
			return
		}
		if ct := r.Header.Get("Content-Type"); (ct != "" || hasBody(r)) && !isJSON(ct) {
			Error(w, r, errMediaType)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hasBody reports whether r came with a body: bytes of one, or one that
// failed to arrive; an empty chunked body is none.
func hasBody(r *http.Request) bool {
	if b, ok := r.Body.(*bufferedBody); ok {
		return b.err != nil || len(b.data) > 0
	}
	return r.ContentLength != 0
}
