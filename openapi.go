package lockapi

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"

	"go.yaml.in/yaml/v3"
)

// OpenAPI is lockapi's HTTP contract, the OpenAPI 3.0.3 document in
// openapi.yaml. The server serves it at GET /openapi.yaml, and clients are
// generated from it (oapi-codegen, openapi-typescript), so it stays in plain
// 3.0 form: named schemas, nullable rather than type arrays, and an
// operationId on every operation.
//
//go:embed openapi.yaml
var OpenAPI []byte

// OpenAPIJSON returns OpenAPI as JSON, its members in the YAML's order, for
// tools that read no YAML; the server serves it at GET /openapi.json. It is
// converted from the embedded YAML on the first call.
func OpenAPIJSON() []byte { return openAPIJSON() }

var openAPIJSON = sync.OnceValue(func() []byte {
	var doc yaml.Node
	if err := yaml.Unmarshal(OpenAPI, &doc); err != nil {
		panic(fmt.Sprintf("openapi.yaml: %v", err))
	}
	var buf bytes.Buffer
	if err := writeJSON(&buf, &doc); err != nil {
		panic(fmt.Sprintf("openapi.yaml as JSON: %v", err))
	}
	return buf.Bytes()
})

// writeJSON writes the YAML node n as JSON, keeping the order of mapping
// keys, which encoding/json would sort.
func writeJSON(buf *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return fmt.Errorf("line %d: a document of %d nodes", n.Line, len(n.Content))
		}
		return writeJSON(buf, n.Content[0])
	case yaml.AliasNode:
		return writeJSON(buf, n.Alias)
	case yaml.MappingNode:
		buf.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				buf.WriteByte(',')
			}
			key, err := json.Marshal(n.Content[i].Value)
			if err != nil {
				return err
			}
			buf.Write(key)
			buf.WriteByte(':')
			if err := writeJSON(buf, n.Content[i+1]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
		return nil
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeJSON(buf, c); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
		return nil
	}
	var v any
	switch n.ShortTag() {
	case "!!null":
		v = nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return err
		}
		v = b
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			return err
		}
		v = i
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return err
		}
		v = f
	default: // strings, and timestamps as they are written
		v = n.Value
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	buf.Write(b)
	return nil
}
