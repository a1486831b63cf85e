//go:build tools

// This file pins dependencies that are added before the code that uses them
// lands, so that parallel work does not edit go.mod at the same time.
package lockapi

import (
	_ "github.com/getkin/kin-openapi/openapi3"
	_ "github.com/go-chi/chi/v5"
	_ "github.com/jackc/pgx/v5"
	_ "github.com/oklog/ulid/v2"
	_ "github.com/ory/dockertest/v3"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/rs/zerolog"
)
