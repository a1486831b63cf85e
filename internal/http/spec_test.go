package http_test

import (
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/lockapi/lockapi"
)

// TestSpec_RequestBodiesClosed: the server refuses a JSON member it does
// not know (decodeBody), so every request body schema says so, with
// additionalProperties false. The signed release URL ignores its body.
func TestSpec_RequestBodiesClosed(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(lockapi.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.RequestBody == nil || op.OperationID == "releaseBySignedURL" {
				continue
			}
			mt := op.RequestBody.Value.Content.Get("application/json")
			if mt == nil {
				t.Errorf("%s %s: no application/json request body", method, path)
				continue
			}
			ap := mt.Schema.Value.AdditionalProperties
			if ap.Has == nil || *ap.Has || ap.Schema != nil {
				t.Errorf("%s %s: request body %s allows members the server refuses: want additionalProperties: false", method, path, mt.Schema.Ref)
			}
		}
	}
}
