// Package apitest is lockapi's contract test kit: an HTTP client that
// checks every response it receives against openapi.yaml, and a generator
// (Gen) of valid and invalid requests drawn from the spec alone.
//
// Use the client for every request a test sends to a lockapi server, so
// that the tests of the behaviour are also tests of the contract:
//
//	c := apitest.NewClient(t, srv.URL)
//	resp, err := c.Post(srv.URL+"/v1/locks/a/leases", "application/json", nil)
//
// The property-based contract test (internal/http/contract_test.go) sends
// the generator's requests through it.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/lockapi/lockapi"
)

// ProblemTypeBase prefixes every problem type URI.
const ProblemTypeBase = "https://lockapi.dev/problems/"

func init() {
	// The spec gives GET /openapi.yaml the schema "string": the YAML text
	// itself, not the value it encodes. kin-openapi's default YAML decoder
	// would parse it into a map. Registered once, before any test runs,
	// because the registry is a global map without a lock.
	openapi3filter.RegisterBodyDecoder("application/yaml", textDecoder)
	openapi3filter.RegisterBodyDecoder("application/problem+json", openapi3filter.JSONBodyDecoder)
}

func textDecoder(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	b, err := io.ReadAll(body)
	return string(b), err
}

// Option changes what a client checks.
type Option func(*transport)

// ValidateRequests makes the client also check each request against the
// spec. Leave it off in tests that send malformed requests on purpose.
func ValidateRequests() Option {
	return func(t *transport) { t.validateRequests = true }
}

// NewClient returns a client for the lockapi server at baseURL (e.g.
// "http://127.0.0.1:8080") whose transport validates every response, in the
// light of its request, against openapi.yaml (and with ValidateRequests
// every request too) and reports each mismatch with tb.Errorf. The spec's
// server URL is replaced by baseURL.
//
// Besides the schemas it checks what the contract says in prose: every
// response carries X-Request-ID, every error is application/problem+json
// whose status member matches the status, and requests the spec has no
// operation for are answered with a not-found or method-not-allowed problem.
func NewClient(tb testing.TB, baseURL string, opts ...Option) *http.Client {
	tb.Helper()
	sp, err := loadSpec(strings.TrimSuffix(baseURL, "/"))
	if err != nil {
		tb.Fatalf("apitest: %v", err)
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	tb.Cleanup(base.CloseIdleConnections)
	t := &transport{tb: tb, base: base, router: sp.router, problem: sp.problem}
	for _, opt := range opts {
		opt(t)
	}
	// Each answer is checked as the server gave it: a redirect is not
	// followed to a page the spec does not describe (GET / to /ui/).
	return &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// spec is openapi.yaml ready to validate exchanges with one server.
type spec struct {
	router  routers.Router
	problem *openapi3.Schema
}

// specs caches a spec per base URL: loading and validating the document
// takes a while, and clients of one server can share it, read-only.
var specs = struct {
	sync.Mutex
	m map[string]*spec
}{m: map[string]*spec{}}

func loadSpec(baseURL string) (*spec, error) {
	specs.Lock()
	defer specs.Unlock()
	if sp := specs.m[baseURL]; sp != nil {
		return sp, nil
	}
	doc, err := openapi3.NewLoader().LoadFromData(lockapi.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("load openapi.yaml: %w", err)
	}
	doc.Servers = openapi3.Servers{{URL: baseURL}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route openapi.yaml: %w", err)
	}
	problem := doc.Components.Schemas["Problem"]
	if problem == nil || problem.Value == nil {
		return nil, errors.New("openapi.yaml has no Problem schema")
	}
	sp := &spec{router: router, problem: problem.Value}
	specs.m[baseURL] = sp
	return sp, nil
}

// transport validates the exchanges of its base transport.
type transport struct {
	tb               testing.TB
	base             http.RoundTripper
	router           routers.Router
	problem          *openapi3.Schema
	validateRequests bool
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	// Keep a copy of the request body for request validation.
	var reqBody []byte
	if t.validateRequests && req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = b
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}

	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))

	for _, problem := range t.check(req, reqBody, resp, body) {
		t.tb.Errorf("apitest: %s %s -> %d: %s\nresponse body: %s", req.Method, req.URL.RequestURI(), resp.StatusCode, problem, truncate(body))
	}
	return resp, nil
}

// check returns every way the exchange breaks the contract.
func (t *transport) check(req *http.Request, reqBody []byte, resp *http.Response, body []byte) []string {
	var problems []string
	if resp.Header.Get("X-Request-ID") == "" {
		problems = append(problems, "no X-Request-ID header")
	}
	// HEAD is answered as GET is, without the body (RFC 9110).
	head := req.Method == http.MethodHead
	if head {
		if len(body) > 0 {
			problems = append(problems, "HEAD answered a body")
		}
		req = withMethod(req, http.MethodGet)
	}
	if resp.StatusCode >= 400 {
		problems = append(problems, t.checkProblem(resp, body, head)...)
	}

	route, pathParams, err := t.router.FindRoute(req)
	if err != nil {
		return append(problems, t.checkRefused(req, resp)...)
	}
	// The router hands out the parameters as the path spells them; the
	// spec's schemas describe them decoded, once.
	for k, v := range pathParams {
		if d, err := url.PathUnescape(v); err == nil {
			pathParams[k] = d
		}
	}
	problems = append(problems, checkDocumented(route, resp)...)
	in := &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: pathParams,
		Route:      route,
		Options:    &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	if t.validateRequests {
		problems = append(problems, validateRequest(in, reqBody)...)
	}
	return append(problems, validateResponse(in, resp, body, head)...)
}

// withMethod is a copy of req with another method.
func withMethod(req *http.Request, method string) *http.Request {
	other := req.Clone(req.Context())
	other.Method = method
	return other
}

// checkRefused checks the answer to a request the spec has no operation
// for: the server must refuse it, with 405 and Allow if the path has other
// methods, else with a 4xx.
func (t *transport) checkRefused(req *http.Request, resp *http.Response) []string {
	if allowed := t.methodsFor(req); len(allowed) > 0 {
		if resp.StatusCode != http.StatusMethodNotAllowed {
			return []string{fmt.Sprintf("the spec has only %s for this path, so the status must be 405, not %d", strings.Join(allowed, ", "), resp.StatusCode)}
		}
		if resp.Header.Get("Allow") == "" {
			return []string{"405 without an Allow header"}
		}
		return nil
	}
	if resp.StatusCode < 400 || resp.StatusCode >= 500 {
		return []string{fmt.Sprintf("the spec has no such route, so the status must be 4xx, not %d", resp.StatusCode)}
	}
	return nil
}

// methodsFor returns the methods the spec has for req's path.
func (t *transport) methodsFor(req *http.Request) []string {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == req.Method {
			continue
		}
		if _, _, err := t.router.FindRoute(withMethod(req, m)); err == nil {
			allowed = append(allowed, m)
		}
	}
	return allowed
}

// checkDocumented checks that the operation documents the response's
// status, and models every header the response carries that is not one of
// the generalHeaders.
func checkDocumented(route *routers.Route, resp *http.Response) []string {
	documented := route.Operation.Responses.Value(strconv.Itoa(resp.StatusCode))
	if documented == nil && resp.StatusCode == http.StatusInternalServerError {
		// The default response is documented as the internal error.
		documented = route.Operation.Responses.Default()
	}
	if documented == nil {
		return []string{fmt.Sprintf("status %d is not documented for %s", resp.StatusCode, route.Operation.OperationID)}
	}
	modelled := map[string]bool{}
	for name := range documented.Value.Headers {
		modelled[http.CanonicalHeaderKey(name)] = true
	}
	var problems []string
	for name := range resp.Header {
		if !modelled[name] && !generalHeaders[name] {
			problems = append(problems, fmt.Sprintf("header %s is not modelled on the %d of %s", name, resp.StatusCode, route.Operation.OperationID))
		}
	}
	return problems
}

// validateRequest validates in's request, with reqBody as its body, against
// the operation's parameters and request body. in is left as it was.
func validateRequest(in *openapi3filter.RequestValidationInput, reqBody []byte) []string {
	ctx := context.Background()
	req := in.Request
	vreq := req.Clone(ctx)
	if reqBody != nil {
		vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	in.Request = vreq
	defer func() { in.Request = req }()
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
		return []string{"request does not match the spec: " + err.Error()}
	}
	return nil
}

// validateResponse validates the response to in's request, its status,
// headers and body (but the body of an answer to a HEAD, which has none),
// against the operation's responses.
func validateResponse(in *openapi3filter.RequestValidationInput, resp *http.Response, body []byte, head bool) []string {
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: head},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return []string{"response does not match the spec: " + err.Error()}
	}
	return nil
}

// checkProblem checks an error response: a problem+json body of the
// Problem schema whose status matches the response's, and whose type
// matches the status. Of the answer to a HEAD only the Content-Type is
// there to check.
func (t *transport) checkProblem(resp *http.Response, body []byte, head bool) []string {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "application/problem+json" {
		return []string{fmt.Sprintf("error Content-Type %q, want application/problem+json", resp.Header.Get("Content-Type"))}
	}
	if head {
		return nil
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return []string{"error body is not JSON: " + err.Error()}
	}
	if err := t.problem.VisitJSON(v); err != nil {
		return []string{"error body does not match the Problem schema: " + err.Error()}
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	_ = json.Unmarshal(body, &p)
	var problems []string
	if p.Status != resp.StatusCode {
		problems = append(problems, fmt.Sprintf("problem status %d, response status %d", p.Status, resp.StatusCode))
	}
	if want, ok := problemStatus[strings.TrimPrefix(p.Type, ProblemTypeBase)]; ok && want != resp.StatusCode {
		problems = append(problems, fmt.Sprintf("problem type %s goes with status %d, not %d", p.Type, want, resp.StatusCode))
	}
	return problems
}

// generalHeaders are the headers that a response may carry although the
// spec does not model them on it: HTTP's own, and those its description
// says every answer, or every answer of a kind, carries.
var generalHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Date": true, "Connection": true,
	"Transfer-Encoding": true, "Vary": true,
	"X-Content-Type-Options": true, "Cache-Control": true, "X-Accel-Buffering": true,
}

// problemStatus is the table of problem types in openapi.yaml.
var problemStatus = map[string]int{
	"invalid-request":        http.StatusBadRequest,
	"not-found":              http.StatusNotFound,
	"method-not-allowed":     http.StatusMethodNotAllowed,
	"lock-held":              http.StatusConflict,
	"events-gone":            http.StatusGone,
	"events-disabled":        http.StatusNotImplemented,
	"limit-mismatch":         http.StatusConflict,
	"upgrade-refused":        http.StatusConflict,
	"lease-lost":             http.StatusGone,
	"payload-too-large":      http.StatusRequestEntityTooLarge,
	"unsupported-media-type": http.StatusUnsupportedMediaType,
	"internal":               http.StatusInternalServerError,
	"unavailable":            http.StatusServiceUnavailable,
}

func truncate(b []byte) string {
	const max = 2000
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}
