package contracts

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Schema names, as files under schemas/.
const (
	SchemaRequest    = "request.schema.json"
	SchemaResponse   = "response.schema.json"
	SchemaVirusEvent = "virus-event.schema.json"
	SchemaProgress   = "progress.schema.json"
)

//go:embed schemas/*.json schemas/seed/*.json
var schemaFS embed.FS

// seedSchemas are the seed contract's schemas (seeds/001, verbatim under schemas/seed/) for the
// documents it defines. ValidateJSON checks a document against them as well as against ours, so every
// test that validates an event also proves that the project's schemas accept nothing the seed's
// reject.
var seedSchemas = map[string]string{
	SchemaRequest:  "seed/" + SchemaRequest,
	SchemaResponse: "seed/" + SchemaResponse,
}

// SchemaJSON returns the raw JSON Schema (draft 2020-12) of one of the Schema* names.
func SchemaJSON(name string) ([]byte, error) { return schemaFS.ReadFile("schemas/" + name) }

var (
	compileOnce sync.Once
	compiled    map[string]*jsonschema.Schema
	compileErr  error
)

// ValidateJSON validates a document against one of the embedded schemas, with format assertions on
// (uuid, uri, date-time are checked, not just annotated), and against the seed contract's schema for
// the same document where it has one.
func ValidateJSON(name string, doc []byte) error {
	if err := validateOne(name, doc); err != nil {
		return err
	}
	if seed, ok := seedSchemas[name]; ok && !namesRecipe(name, doc) {
		if err := validateOne(seed, doc); err != nil {
			return fmt.Errorf("valid by our schema but not by the seed contract's: %w", err)
		}
	}
	return nil
}

// namesRecipe reports whether doc is a response to a request that named a recipe. Such an answer is
// the project's extension: its variants' names and formats go beyond the seed contract's enums (our
// schema says exactly how), so only ours judges it. An answer without recipe is judged by both.
func namesRecipe(name string, doc []byte) bool {
	if name != SchemaResponse {
		return false
	}
	var r struct {
		Recipe *string `json:"recipe"`
	}
	return json.Unmarshal(doc, &r) == nil && r.Recipe != nil
}

// validateOne validates a document against one schema file under schemas/.
func validateOne(name string, doc []byte) error {
	compileOnce.Do(compileSchemas)
	if compileErr != nil {
		return compileErr
	}
	sch, ok := compiled[name]
	if !ok {
		return fmt.Errorf("unknown schema %q", name)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("decoding document: %w", err)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("validating against %s: %w", name, err)
	}
	return nil
}

// Validate marshals v and validates it against the named schema.
func Validate(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding: %w", err)
	}
	return ValidateJSON(name, b)
}

func compileSchemas() {
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	compiled = map[string]*jsonschema.Schema{}
	names := []string{SchemaRequest, SchemaResponse, SchemaVirusEvent, SchemaProgress}
	for _, seed := range seedSchemas {
		names = append(names, seed)
	}
	for _, name := range names {
		raw, err := SchemaJSON(name)
		if err != nil {
			compileErr = err
			return
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			compileErr = fmt.Errorf("decoding schema %s: %w", name, err)
			return
		}
		if err := c.AddResource(name, doc); err != nil {
			compileErr = fmt.Errorf("adding schema %s: %w", name, err)
			return
		}
	}
	for _, name := range names {
		s, err := c.Compile(name)
		if err != nil {
			compileErr = fmt.Errorf("compiling schema %s: %w", name, err)
			return
		}
		compiled[name] = s
	}
}
