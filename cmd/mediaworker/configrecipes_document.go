package main

import (
	"go.yaml.in/yaml/v3"
)

// A recipe's documents side: the document kind's part of the recipes section (configrecipes.go reads
// the rest).
//
//	recipes:
//	  pages:
//	    documents: true
//	    images:
//	      - {name: page, width: 1200, format: webp}

// documentsDoc is the key's meaning, for docs/operations.md (settingsdoc.go).
const documentsDoc = "is `true` or `false` (the default): with `true` a PDF's first page and an SVG become the recipe's image variants " +
	"(its `images`, or the default variants; never stored as SVG), rendered in a confined child process (the `documents:` section's limits), " +
	"and the answer's metadata has `pages`; without it they are refused as unsupported media, as always. Not in the `default` recipe."

// documentsDescribed is what `config` says of a recipe with documents.
const documentsDescribed = "documents: a PDF's first page and SVGs become its images"

// documentsNotInDefault is seedSafe's refusal of documents in the default recipe.
const documentsNotInDefault = "the default recipe answers seed contract clients: it refuses documents as unsupported media (define a recipe of another name with documents: true)"

// decodeDocuments reads a recipe's documents key: a boolean.
func (f *configFile) decodeDocuments(dotted string, n *yaml.Node) (bool, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return false, f.errAt(n, dotted, "must be true or false, got %s", kindName(n))
	}
	return n.Value == "true", nil
}
