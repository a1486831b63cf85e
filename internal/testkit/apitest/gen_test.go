package apitest

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/url"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
)

// TestGen_DraftsAgreeWithSpec: kin-openapi's request validation accepts
// every valid draft and refuses every broken one, so the contract test's
// verdicts on the server rest on the spec, not on the generator.
func TestGen_DraftsAgreeWithSpec(t *testing.T) {
	const base = "http://lockapi.test"
	sp, err := loadSpec(base)
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGen(1)
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	validate := func(d *Draft) error {
		req, err := d.Request(context.Background(), base, rnd)
		if err != nil {
			t.Fatal(err)
		}
		route, params, err := sp.router.FindRoute(req)
		if err != nil {
			return err
		}
		for k, v := range params {
			if dv, err := url.PathUnescape(v); err == nil {
				params[k] = dv
			}
		}
		return openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
			// kin-openapi would put a member's default in place of null.
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, SkipSettingDefaults: true},
		})
	}
	for _, op := range g.Operations() {
		t.Run(op.ID, func(t *testing.T) {
			broken := 0
			for range 50 {
				d := g.Valid(op)
				if err := validate(d); err != nil {
					t.Fatalf("a valid draft (path %v query %v header %v body %v) is invalid: %v", d.Path, d.Query, d.Header, d.Body, err)
				}
				if d = g.Valid(op); !g.Break(d, nil) {
					continue
				}
				broken++
				if d.RawBody != nil {
					// kin-openapi reads the first JSON value of a body and
					// ignores the rest; the server does not.
					var v map[string]any
					if json.Unmarshal(d.RawBody, &v) == nil {
						t.Fatalf("%q is one JSON object", d.RawBody)
					}
					continue
				}
				if err := validate(d); err == nil {
					t.Fatalf("a draft breaking %v is valid", d.Broken)
				}
			}
			if broken == 0 && len(op.params)+btoi(op.body != nil) > 0 {
				t.Errorf("%s has inputs, and none was broken", op.ID)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
