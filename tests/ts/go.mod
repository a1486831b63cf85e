module github.com/lockapi/lockapi/tests/ts

// This file only keeps the npm project (and its node_modules) out of the
// main module's ./... pattern.

go 1.26
