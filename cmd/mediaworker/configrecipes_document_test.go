package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A recipe's documents key: a recipe may ask for documents alone (the default variants are its
// images), `config` says so; the default recipe may not (seed clients keep their answer), and the key
// is a boolean, refused at its own line otherwise.
func TestRecipeDocumentsKey(t *testing.T) {
	check := func(yaml string) (int, string) {
		file := filepath.Join(t.TempDir(), "site.yaml")
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code := cmdConfig(context.Background(), []string{"--config", file}, &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := check("recipes:\n  pages:\n    documents: true\n"); code != 0 || !strings.Contains(out, "pages (") || !strings.Contains(out, documentsDescribed) {
		t.Errorf("a documents-only recipe: exit %d\n%s", code, out)
	}
	if code, out := check("recipes:\n  default:\n    documents: true\n"); code == 0 || !strings.Contains(out, documentsNotInDefault) {
		t.Errorf("documents in the default recipe: exit %d\n%s", code, out)
	}
	if code, out := check("recipes:\n  pages:\n    documents: yes please\n"); code == 0 || !strings.Contains(out, "recipes.pages.documents") || !strings.Contains(out, "must be true or false") {
		t.Errorf("documents: yes please: exit %d\n%s", code, out)
	}
}
