module github.com/lockapi/lockapi/sdk/ts

// This file only keeps the npm package (and its node_modules) out of the
// main module's ./... pattern.

go 1.26
