package api

// The generator is pinned by the tool directive in go.mod, so this needs
// nothing beyond the module proxy. TestGenerated fails when the committed
// api.gen.go differs from what this would write.
//
//go:generate go tool oapi-codegen -config oapi-codegen.yaml -o api.gen.go ../../openapi.yaml
