package lockapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/lockapi/lockapi/event"
)

const problemRef = "#/components/schemas/Problem"

// contract is the fixed HTTP contract: every operation with its explicit
// response statuses. The spec must match it exactly.
var contract = []struct {
	method, path, id string
	statuses         []string
}{
	{http.MethodPost, "/v1/locks/{name}/leases", "acquireLease", []string{"200", "201", "400", "401", "403", "404", "409", "410", "413", "415", "429", "501", "503"}},
	{http.MethodPost, "/v1/locks/{name}/leases/{lease_id}/renew", "renewLease", []string{"200", "400", "401", "403", "410", "413", "415", "429", "503"}},
	{http.MethodDelete, "/v1/locks/{name}/leases/{lease_id}", "releaseLease", []string{"200", "400", "401", "403", "410", "415", "429", "503"}},
	{http.MethodPatch, "/v1/locks/{name}/leases/{lease_id}", "updateLease", []string{"200", "400", "401", "403", "410", "413", "415", "429", "501", "503"}},
	{http.MethodPost, "/v1/locks/{name}/leases/{lease_id}/release", "releaseBySignedURL", []string{"200", "400", "403", "410", "429", "503"}},
	{http.MethodPost, "/v1/leases", "acquireLeases", []string{"201", "400", "401", "403", "404", "409", "410", "413", "415", "429", "501", "503"}},
	{http.MethodDelete, "/v1/leases", "releaseLeases", []string{"200", "400", "401", "403", "415", "429", "503"}},
	{http.MethodGet, "/v1/locks/{name}", "getLock", []string{"200", "400", "401", "403", "429", "503"}},
	{http.MethodDelete, "/v1/locks/{name}", "forceRelease", []string{"200", "400", "401", "403", "415", "429", "503"}},
	{http.MethodGet, "/v1/locks", "listLocks", []string{"200", "400", "401", "403", "429", "503"}},
	{http.MethodPost, "/v1/sessions", "createSession", []string{"201", "400", "401", "403", "413", "415", "429", "501", "503"}},
	{http.MethodGet, "/v1/sessions", "listSessions", []string{"200", "400", "401", "403", "429", "501", "503"}},
	{http.MethodGet, "/v1/sessions/{id}", "getSession", []string{"200", "400", "401", "403", "404", "410", "429", "501", "503"}},
	{http.MethodDelete, "/v1/sessions/{id}", "deleteSession", []string{"200", "400", "401", "403", "404", "410", "415", "429", "501", "503"}},
	{http.MethodPost, "/v1/sessions/{id}/renew", "renewSession", []string{"200", "400", "401", "403", "404", "410", "413", "415", "429", "501", "503"}},
	{http.MethodGet, "/v1/events", "getEvents", []string{"200", "400", "401", "403", "410", "429", "501", "503"}},
	{http.MethodGet, "/v1/locks/{name}/history", "getLockHistory", []string{"200", "400", "401", "403", "429", "501", "503"}},
	{http.MethodGet, "/v1/stats/locks", "getLockStats", []string{"200", "400", "401", "403", "429", "501"}},
	{http.MethodPost, "/v1/webhooks", "createWebhook", []string{"201", "400", "401", "403", "409", "413", "415", "429", "501", "503"}},
	{http.MethodGet, "/v1/webhooks", "listWebhooks", []string{"200", "400", "401", "403", "429", "501", "503"}},
	{http.MethodGet, "/v1/webhooks/{id}", "getWebhook", []string{"200", "400", "401", "403", "404", "429", "501", "503"}},
	{http.MethodDelete, "/v1/webhooks/{id}", "deleteWebhook", []string{"204", "400", "401", "403", "404", "409", "415", "429", "501", "503"}},
	{http.MethodPost, "/v1/webhooks/{id}/ping", "pingWebhook", []string{"200", "400", "401", "403", "404", "415", "429", "501", "503"}},
	{http.MethodGet, "/v1/webhooks/{id}/dead-letters", "listDeadLetters", []string{"200", "400", "401", "403", "404", "429", "501", "503"}},
	{http.MethodPost, "/v1/webhooks/{id}/dead-letters/{event_id}/replay", "replayDeadLetter", []string{"202", "400", "401", "403", "404", "415", "429", "501", "503"}},
	{http.MethodGet, "/", "getRoot", []string{"302"}},
	{http.MethodGet, "/healthz", "getHealth", []string{"200"}},
	{http.MethodGet, "/readyz", "getReady", []string{"200", "503"}},
	{http.MethodGet, "/openapi.yaml", "getOpenAPI", []string{"200"}},
	{http.MethodGet, "/openapi.json", "getOpenAPIJSON", []string{"200"}},
	{http.MethodGet, "/metrics", "getMetrics", []string{"200", "404"}},
}

// mustLoadOpenAPI parses the embedded spec and fails on any validation error,
// examples included.
func mustLoadOpenAPI(tb testing.TB) *openapi3.T {
	tb.Helper()
	ctx := context.Background()
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	if err != nil {
		tb.Fatalf("load openapi.yaml: %v", err)
	}
	if err := doc.Validate(ctx, openapi3.EnableExamplesValidation()); err != nil {
		tb.Fatalf("validate openapi.yaml: %v", err)
	}
	return doc
}

// TestOpenAPI_Validate is the spec lint test.
func TestOpenAPI_Validate(t *testing.T) {
	doc := mustLoadOpenAPI(t)
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi = %q, want 3.0.3 (generators need 3.0)", doc.OpenAPI)
	}
}

func TestOpenAPI_Operations(t *testing.T) {
	doc := mustLoadOpenAPI(t)

	want := map[string]bool{}
	for _, c := range contract {
		want[c.method+" "+c.path] = true
		t.Run(c.id, func(t *testing.T) {
			item := doc.Paths.Value(c.path)
			if item == nil {
				t.Fatalf("path %s missing", c.path)
			}
			op := item.GetOperation(c.method)
			if op == nil {
				t.Fatalf("%s %s missing", c.method, c.path)
			}
			if op.OperationID != c.id {
				t.Errorf("operationId = %q, want %q", op.OperationID, c.id)
			}
			if op.Description == "" && op.Summary == "" {
				t.Error("no summary or description")
			}

			var statuses []string
			for code := range op.Responses.Map() {
				if code != "default" {
					statuses = append(statuses, code)
				}
			}
			slices.Sort(statuses)
			if !slices.Equal(statuses, c.statuses) {
				t.Errorf("statuses = %v, want %v", statuses, c.statuses)
			}

			errResponses := 0
			for code, ref := range op.Responses.Map() {
				resp := ref.Value
				if _, ok := resp.Headers["X-Request-ID"]; !ok {
					t.Errorf("%s: no X-Request-ID header", code)
				}
				if !isErrorStatus(code) {
					continue
				}
				errResponses++
				if len(resp.Content) != 1 {
					t.Errorf("%s: content types %v, want only application/problem+json", code, slices.Sorted(maps.Keys(resp.Content)))
				}
				mt := resp.Content.Get("application/problem+json")
				if mt == nil || mt.Schema == nil || mt.Schema.Ref != problemRef {
					t.Errorf("%s: not an application/problem+json %s", code, problemRef)
				}
			}
			if errResponses == 0 {
				t.Error("no default or error response")
			}
		})
	}

	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !want[method+" "+path] {
				t.Errorf("%s %s is not in the contract", method, path)
			}
		}
	}
}

// TestOpenAPI_NamedSchemas checks that request and response bodies use named
// schemas, so generated clients get named types.
func TestOpenAPI_NamedSchemas(t *testing.T) {
	doc := mustLoadOpenAPI(t)
	check := func(where string, content openapi3.Content) {
		for ct, mt := range content {
			if mt.Schema == nil || !strings.HasPrefix(mt.Schema.Ref, "#/components/schemas/") {
				t.Errorf("%s %s: inline schema, want a $ref to components/schemas", where, ct)
			}
		}
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			if op.RequestBody != nil {
				check(where+" request", op.RequestBody.Value.Content)
			}
			for code, ref := range op.Responses.Map() {
				check(where+" "+code, ref.Value.Content)
			}
		}
	}
}

// TestOpenAPI_ProblemTypes: ProblemType is an open string, so that a
// generated client does not fail on a type added later, and both its
// description and the API's list every type of today.
func TestOpenAPI_ProblemTypes(t *testing.T) {
	doc := mustLoadOpenAPI(t)
	pt := doc.Components.Schemas["ProblemType"]
	if pt == nil {
		t.Fatal("no ProblemType schema")
	}
	if len(pt.Value.Enum) > 0 || !pt.Value.Type.Is("string") {
		t.Errorf("ProblemType is %v with enum %v, want an open string", pt.Value.Type, pt.Value.Enum)
	}
	for _, name := range []string{"invalid-request", "unauthorized", "forbidden", "reserved-name", "rate-limited", "lock-held", "limit-mismatch", "upgrade-refused", "lease-lost", "lock-delay", "session-not-found", "session-lost", "events-gone", "not-found", "method-not-allowed", "unsupported-media-type", "payload-too-large", "events-disabled", "webhook-exists", "webhook-read-only", "webhooks-disabled", "unavailable", "internal"} {
		uri := "https://lockapi.dev/problems/" + name
		if !strings.Contains(doc.Info.Description, "`"+uri+"`") {
			t.Errorf("info.description does not list problem type %s", name)
		}
		if !strings.Contains(pt.Value.Description, "`"+uri+"`") {
			t.Errorf("ProblemType's description does not list %s", name)
		}
	}
}

// TestOpenAPI_EventTypes: the event types are one schema, EventType, whose
// enum is the server's list (event.Types); every other place refers to it
// rather than list the types again.
func TestOpenAPI_EventTypes(t *testing.T) {
	doc := mustLoadOpenAPI(t)
	et := doc.Components.Schemas["EventType"]
	if et == nil {
		t.Fatal("no EventType schema")
	}
	var enum []string
	for _, v := range et.Value.Enum {
		enum = append(enum, fmt.Sprint(v))
	}
	var want []string
	for _, typ := range event.Types {
		want = append(want, string(typ))
	}
	if !slices.Equal(enum, want) {
		t.Errorf("EventType's enum is %q, want event.Types %q", enum, want)
	}
	if names, _ := et.Value.Extensions["x-enum-varnames"].([]any); len(names) != len(want) {
		t.Errorf("EventType's x-enum-varnames %v: want one per type", names)
	}
	// An inline enum that lists a type is a second copy.
	var walk func(where string, ref *openapi3.SchemaRef)
	walk = func(where string, ref *openapi3.SchemaRef) {
		if ref == nil || ref.Ref != "" || ref.Value == nil {
			return
		}
		for _, v := range ref.Value.Enum {
			if _, ok := event.ParseType(fmt.Sprint(v)); ok {
				t.Errorf("%s lists the event type %v: refer to EventType instead", where, v)
			}
		}
		walk(where+".items", ref.Value.Items)
		for name, p := range ref.Value.Properties {
			walk(where+"."+name, p)
		}
		for i, sub := range slices.Concat(ref.Value.AllOf, ref.Value.OneOf, ref.Value.AnyOf) {
			walk(fmt.Sprintf("%s[%d]", where, i), sub)
		}
	}
	for name, ref := range doc.Components.Schemas {
		if name != "EventType" {
			walk(name, ref)
		}
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for _, p := range op.Parameters {
				walk(method+" "+path+" "+p.Value.Name, p.Value.Schema)
			}
		}
	}
}

func isErrorStatus(code string) bool {
	if code == "default" {
		return true
	}
	n, err := strconv.Atoi(code)
	return err == nil && n >= 400
}

// TestOpenAPI_JSON: the JSON form is the same document as the YAML, in the
// same order.
func TestOpenAPI_JSON(t *testing.T) {
	js := OpenAPIJSON()
	if !json.Valid(js) || !bytes.HasPrefix(js, []byte(`{"openapi":"3.0.3","info":{`)) {
		t.Fatalf("not JSON in the YAML's order: %.80s", js)
	}
	fromJSON, err := openapi3.NewLoader().LoadFromData(js)
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(mustLoadOpenAPI(t))
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(fromJSON)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("openapi.json and openapi.yaml load as different documents")
	}
}

// A request's defaults are the server's, in the descriptions: a default in
// a schema makes a generated client send it, which overrides the server's
// configured default (LOCKAPI_DEFAULT_TTL) and, beside session, is refused.
func TestOpenAPI_no_default_in_a_request(t *testing.T) {
	doc := mustLoadOpenAPI(t)
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			for _, p := range append(item.Parameters, op.Parameters...) {
				if p.Value.Schema != nil {
					noDefault(t, where+" parameter "+p.Value.Name, p.Value.Schema.Value, map[*openapi3.Schema]bool{})
				}
			}
			if op.RequestBody == nil {
				continue
			}
			for ct, media := range op.RequestBody.Value.Content {
				if media.Schema != nil {
					noDefault(t, where+" "+ct+" body", media.Schema.Value, map[*openapi3.Schema]bool{})
				}
			}
		}
	}
}

// noDefault fails the test when s, or a schema within it, has a default.
func noDefault(t *testing.T, where string, s *openapi3.Schema, seen map[*openapi3.Schema]bool) {
	t.Helper()
	if s == nil || seen[s] {
		return
	}
	seen[s] = true
	if s.Default != nil {
		t.Errorf("%s: default %v in the schema; say it in the description", where, s.Default)
	}
	for name, p := range s.Properties {
		noDefault(t, where+"."+name, p.Value, seen)
	}
	for _, refs := range []openapi3.SchemaRefs{s.AllOf, s.AnyOf, s.OneOf} {
		for _, r := range refs {
			noDefault(t, where, r.Value, seen)
		}
	}
	if s.Items != nil {
		noDefault(t, where+"[]", s.Items.Value, seen)
	}
}

// The schema itself refuses session beside ttl_ms, as the server does, so a
// generated client's validation says so before a 400 does.
func TestOpenAPI_session_and_ttl_do_not_go_together(t *testing.T) {
	doc := mustLoadOpenAPI(t)
	const session = "01JD3Z8Q6W9M4T5R2K7X1B0C9S"
	for _, name := range []string{"AcquireRequest", "MultiAcquireRequest"} {
		s := doc.Components.Schemas[name].Value
		locks := []any{"a"}
		body := func(fields map[string]any) map[string]any {
			if name == "MultiAcquireRequest" {
				fields["locks"] = locks
			}
			return fields
		}
		for _, ok := range []map[string]any{{"session": session}, {"ttl_ms": 1000.0}, {}} {
			if err := s.VisitJSON(body(ok)); err != nil {
				t.Errorf("%s refuses %v: %v", name, ok, err)
			}
		}
		if err := s.VisitJSON(body(map[string]any{"session": session, "ttl_ms": 1000.0})); err == nil {
			t.Errorf("%s accepts session with ttl_ms", name)
		}
	}
}

// Every link names an operation, and only parameters it has and body
// members its request takes.
func TestOpenAPI_links(t *testing.T) {
	doc := mustLoadOpenAPI(t)
	ops := map[string]*openapi3.Operation{}
	params := map[string]openapi3.Parameters{} // the path's and the operation's
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			ops[op.OperationID] = op
			params[op.OperationID] = append(slices.Clone(item.Parameters), op.Parameters...)
		}
	}
	for _, want := range []struct{ from, link, to string }{
		{"createSession", "get", "getSession"}, {"createSession", "renew", "renewSession"},
		{"createSession", "delete", "deleteSession"}, {"createSession", "acquire", "acquireLease"},
		{"createSession", "acquireAll", "acquireLeases"},
		{"acquireLease", "renew", "renewLease"}, {"acquireLease", "release", "releaseLease"},
	} {
		for status, resp := range ops[want.from].Responses.Map() {
			if !strings.HasPrefix(status, "2") {
				continue
			}
			l := resp.Value.Links[want.link]
			if l == nil || l.Value.OperationID != want.to {
				t.Errorf("%s %s: no link %s to %s", want.from, status, want.link, want.to)
				continue
			}
			to := ops[want.to]
			for p := range l.Value.Parameters {
				if !slices.ContainsFunc(params[want.to], func(r *openapi3.ParameterRef) bool { return r.Value.Name == p }) {
					t.Errorf("%s %s link %s: %s has no parameter %s", want.from, status, want.link, want.to, p)
				}
			}
			if body, ok := l.Value.RequestBody.(map[string]any); ok {
				schema := to.RequestBody.Value.Content["application/json"].Schema.Value
				for member := range body {
					if schema.Properties[member] == nil {
						t.Errorf("%s %s link %s: %s's body has no %s", want.from, status, want.link, want.to, member)
					}
				}
			}
		}
	}
}
