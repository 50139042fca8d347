// Package api holds the contract of Zygo's HTTP API as an OpenAPI 3.1 document
// (openapi.yaml, embedded). The daemon (internal/api) serves it as JSON at
// GET /v1/openapi.json; internal/api's TestOpenAPI* tests hold the server and the document
// to each other.
package api

import (
	_ "embed"
	"fmt"
	"sync"

	"sigs.k8s.io/yaml"
)

// YAML is the OpenAPI document as written.
//
//go:embed openapi.yaml
var YAML []byte

// JSON returns the document as JSON, converted once; an error only when openapi.yaml is not
// valid YAML (which TestOpenAPIDocument rules out).
var JSON = sync.OnceValues(func() ([]byte, error) {
	b, err := yaml.YAMLToJSON(YAML)
	if err != nil {
		return nil, fmt.Errorf("converting openapi.yaml to JSON: %w", err)
	}
	return b, nil
})
