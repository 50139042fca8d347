package api_test

// The OpenAPI document (api/openapi.yaml) against the server, both ways: its routes
// (TestOpenAPIRoutes), its schemas against the wire types' JSON fields (TestOpenAPISchemas),
// and every route driven through the real handler with each answer validated against the
// document, every status it lists produced (TestOpenAPIAnswers, openapi_drive_test.go).

import (
	"fmt"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"sigs.k8s.io/yaml"

	spec "github.com/zygo-run/zygo/api"
	"github.com/zygo-run/zygo/internal/api"
	"github.com/zygo-run/zygo/sdk/go/wire"
)

// rawDoc is the document as plain maps, for the structural comparisons.
var rawDoc = sync.OnceValue(func() map[string]any {
	var m map[string]any
	if err := yaml.Unmarshal(spec.YAML, &m); err != nil {
		panic("api/openapi.yaml: " + err.Error())
	}
	return m
})

func child(m any, keys ...string) map[string]any {
	for _, k := range keys {
		mm, _ := m.(map[string]any)
		m = mm[k]
	}
	mm, _ := m.(map[string]any)
	return mm
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

// docRoutes returns the document's operations as "METHOD /path".
func docRoutes() []string {
	var out []string
	for path, item := range child(rawDoc(), "paths") {
		for _, m := range httpMethods {
			if _, ok := item.(map[string]any)[m]; ok {
				out = append(out, strings.ToUpper(m)+" "+path)
			}
		}
	}
	slices.Sort(out)
	return out
}

// The document is a valid OpenAPI 3.1 document, and the daemon serves it as JSON.
func TestOpenAPIDocument(t *testing.T) {
	doc, err := libopenapi.NewDocument(spec.YAML)
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.GetVersion(); !strings.HasPrefix(v, "3.1") {
		t.Errorf("openapi %s, want 3.1", v)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("api/openapi.yaml: %s: %s", e.Message, e.Reason)
		}
	}
	f := newFixture()
	rec := f.do("GET", "/v1/openapi.json", nil)
	want, _ := spec.JSON()
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" || !slices.Equal(rec.Body.Bytes(), want) {
		t.Errorf("GET /v1/openapi.json: %d %s", rec.Code, rec.Header())
	}
}

// Every route of the server is in the document, and every operation of the document is a
// route of the server.
func TestOpenAPIRoutes(t *testing.T) {
	var server []string
	for _, r := range api.Routes() {
		server = append(server, r.String())
	}
	doc := docRoutes()
	for _, r := range server {
		if !slices.Contains(doc, r) {
			t.Errorf("route %s is served but not in api/openapi.yaml", r)
		}
	}
	for _, r := range doc {
		if !slices.Contains(server, r) {
			t.Errorf("api/openapi.yaml has %s, which the server does not serve", r)
		}
	}
}

// schemaTypes maps each schema of the document to the wire type of the bodies it describes.
var schemaTypes = map[string]reflect.Type{
	"ErrorAnswer":          reflect.TypeFor[wire.ErrorAnswer](),
	"ErrorBody":            reflect.TypeFor[wire.ErrorBody](),
	"StatusBody":           reflect.TypeFor[wire.StatusBody](),
	"DeployResult":         reflect.TypeFor[wire.DeployResult](),
	"Check":                reflect.TypeFor[wire.Check](),
	"Function":             reflect.TypeFor[wire.Function](),
	"Manifest":             reflect.TypeFor[wire.Manifest](),
	"FunctionLimits":       reflect.TypeFor[wire.FunctionLimits](),
	"LogLine":              reflect.TypeFor[wire.LogLine](),
	"LogsBody":             reflect.TypeFor[wire.LogsBody](),
	"SecretMeta":           reflect.TypeFor[wire.SecretMeta](),
	"FunctionPage":         reflect.TypeFor[wire.Page[wire.Function]](),
	"SecretPage":           reflect.TypeFor[wire.Page[wire.SecretMeta]](),
	"SandboxPage":          reflect.TypeFor[wire.Page[wire.Sandbox]](),
	"CheckpointPage":       reflect.TypeFor[wire.Page[wire.Checkpoint]](),
	"CreateSandboxBody":    reflect.TypeFor[wire.CreateSandboxBody](),
	"SandboxNetwork":       reflect.TypeFor[wire.SandboxNetwork](),
	"Service":              reflect.TypeFor[wire.Service](),
	"Sandbox":              reflect.TypeFor[wire.Sandbox](),
	"Checkpoint":           reflect.TypeFor[wire.Checkpoint](),
	"CheckpointOrigin":     reflect.TypeFor[wire.CheckpointOrigin](),
	"ExecBody":             reflect.TypeFor[wire.ExecBody](),
	"CodeBody":             reflect.TypeFor[wire.CodeBody](),
	"StreamEvent":          reflect.TypeFor[wire.StreamEvent](),
	"ExitStatus":           reflect.TypeFor[wire.ExitStatus](),
	"CodeResult":           reflect.TypeFor[wire.CodeResult](),
	"FileInfo":             reflect.TypeFor[wire.FileInfo](),
	"CheckpointBody":       reflect.TypeFor[wire.CheckpointBody](),
	"ForkBody":             reflect.TypeFor[wire.ForkBody](),
	"ForkChild":            reflect.TypeFor[wire.ForkChild](),
	"ForkAnswer":           reflect.TypeFor[wire.ForkAnswer](),
	"ForkProgress":         reflect.TypeFor[wire.ForkProgress](),
	"ForkEvent":            reflect.TypeFor[wire.ForkEvent](),
	"RollbackBody":         reflect.TypeFor[wire.RollbackBody](),
	"TimeoutBody":          reflect.TypeFor[wire.TimeoutBody](),
	"ResumeBody":           reflect.TypeFor[wire.ResumeBody](),
	"RestoreBody":          reflect.TypeFor[wire.RestoreBody](),
	"Template":             reflect.TypeFor[wire.Template](),
	"TemplatePage":         reflect.TypeFor[wire.Page[wire.Template]](),
	"GenerationBody":       reflect.TypeFor[wire.GenerationBody](),
	"SandboxAccessToken":   reflect.TypeFor[wire.SandboxAccessToken](),
	"PortBody":             reflect.TypeFor[wire.PortBody](),
	"ServiceStatus":        reflect.TypeFor[wire.ServiceStatus](),
	"Version":              reflect.TypeFor[wire.Version](),
	"VersionPage":          reflect.TypeFor[wire.Page[wire.Version]](),
	"RollbackFunctionBody": reflect.TypeFor[wire.RollbackFunctionBody](),
	"DeployEvent":          reflect.TypeFor[wire.DeployEvent](),
	"CreateTokenBody":      reflect.TypeFor[wire.CreateTokenBody](),
	"Token":                reflect.TypeFor[wire.Token](),
	"TokenCreated":         reflect.TypeFor[wire.TokenCreated](),
	"TokenPage":            reflect.TypeFor[wire.TokensPage](),
	"PoolUpResult":         reflect.TypeFor[wire.PoolUpResult](),
	"PoolLane":             reflect.TypeFor[wire.PoolLane](),
	"Pool":                 reflect.TypeFor[wire.Pool](),
	"PoolPage":             reflect.TypeFor[wire.PoolPage](),
	"ScriptResult":         reflect.TypeFor[wire.ScriptResult](),
	"PoolRunRequest":       reflect.TypeFor[wire.PoolRunRequest](),
}

// jsonField is one field of a struct as encoding/json writes it.
type jsonField struct {
	name     string
	required bool // always written: no omitempty or omitzero
	typ      reflect.Type
}

// jsonFields returns t's fields as encoding/json writes them: an embedded struct without a
// json name (wire.TokenCreated's Token) has its fields written inline.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := slices.ContainsFunc(strings.Split(opts, ","), func(o string) bool { return o == "omitempty" || o == "omitzero" })
		out = append(out, jsonField{name: name, required: !omit, typ: f.Type})
	}
	return out
}

// structOf returns the struct type a field's value holds (through pointers, slices and maps),
// or nil for a scalar or a time.
func structOf(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Time]() {
		return nil
	}
	return t
}

// refsOf returns the schema names a property refers to, directly or in items, anyOf, oneOf
// or additionalProperties.
func refsOf(prop any) []string {
	m, ok := prop.(map[string]any)
	if !ok {
		return nil
	}
	var out []string
	if r, ok := m["$ref"].(string); ok {
		out = append(out, strings.TrimPrefix(r, "#/components/schemas/"))
	}
	for _, k := range []string{"items", "additionalProperties"} {
		out = append(out, refsOf(m[k])...)
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		alts, _ := m[k].([]any)
		for _, a := range alts {
			out = append(out, refsOf(a)...)
		}
	}
	return out
}

// Every schema's properties are its wire type's JSON fields, both ways; those it requires
// are the fields always written; a property holding a struct refers to that struct's schema.
func TestOpenAPISchemas(t *testing.T) {
	schemas := child(rawDoc(), "components", "schemas")
	for name := range schemas {
		if _, ok := schemaTypes[name]; !ok {
			t.Errorf("schema %s has no wire type in schemaTypes", name)
		}
	}
	schemaOf := map[reflect.Type]string{}
	for name, typ := range schemaTypes {
		schemaOf[typ] = name
	}
	for name, typ := range schemaTypes {
		s := child(schemas, name)
		if s == nil {
			t.Errorf("%s (%s) has no schema in api/openapi.yaml", typ, name)
			continue
		}
		if s["additionalProperties"] != false {
			t.Errorf("schema %s: additionalProperties must be false, so that a field the server adds fails validation", name)
		}
		props := child(s, "properties")
		var required []string
		req, _ := s["required"].([]any)
		for _, r := range req {
			required = append(required, fmt.Sprint(r))
		}
		var fields, wantRequired []string
		for _, f := range jsonFields(typ) {
			fields = append(fields, f.name)
			if f.required {
				wantRequired = append(wantRequired, f.name)
			}
			prop, ok := props[f.name]
			if !ok {
				t.Errorf("%s: field %q of %s is not in the schema", name, f.name, typ)
				continue
			}
			if st := structOf(f.typ); st != nil {
				want, ok := schemaOf[st]
				if !ok {
					t.Errorf("%s.%s: %s has no schema", name, f.name, st)
				} else if !slices.Contains(refsOf(prop), want) {
					t.Errorf("%s.%s: holds a %s, but refers to %q, not %s", name, f.name, st, refsOf(prop), want)
				}
			}
		}
		for p := range props {
			if !slices.Contains(fields, p) {
				t.Errorf("%s: property %q is not a field of %s", name, p, typ)
			}
		}
		slices.Sort(required)
		slices.Sort(wantRequired)
		if !slices.Equal(required, wantRequired) {
			t.Errorf("%s: required %q, but %s always writes %q", name, required, typ, wantRequired)
		}
	}
}

// noRouteAnswers are the answers of no operation: a path of no route, a method a path does not take.
func TestOpenAPINoRoute(t *testing.T) {
	v := newAnswerValidator(t)
	for _, c := range []struct {
		method, target, component string
		status                    int
	}{
		{"GET", "/v1/nope", "NoRoute", 404},
		{"PATCH", "/v1/functions/hello", "MethodNotAllowed", 405},
		{"POST", "/v1/status", "MethodNotAllowed", 405},
	} {
		rec := httptest.NewRecorder()
		newFixture().h.ServeHTTP(rec, httptest.NewRequest(c.method, c.target, nil))
		if rec.Code != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.target, rec.Code, c.status)
		}
		v.checkComponent(t, c.component, rec.Result())
	}
}
