//go:build tools

// Package tools pins the Jaeger program scripts/jaeger/build.sh builds
// (github.com/jaegertracing/jaeger/cmd/jaeger, Jaeger v2: OTLP in, in-memory
// storage, the query API) so that `go mod tidy` keeps its requirements.
package tools

import _ "github.com/jaegertracing/jaeger/cmd/jaeger"
