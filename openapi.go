package lockapi

import _ "embed"

// OpenAPI is lockapi's HTTP contract, the OpenAPI 3.0.3 document in
// openapi.yaml. The server serves it at GET /openapi.yaml, and clients are
// generated from it (oapi-codegen, openapi-typescript), so it stays in plain
// 3.0 form: named schemas, nullable rather than type arrays, and an
// operationId on every operation.
//
//go:embed openapi.yaml
var OpenAPI []byte
