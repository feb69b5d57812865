package app_test

import (
	"slices"
	"testing"

	"github.com/mediaworker/mediaworker/app"
	"github.com/mediaworker/mediaworker/job"
	"github.com/mediaworker/mediaworker/pipeline"
)

// A worker serving "all" lanes serves a kind only recipes turn on (documents) only when one of its
// recipes does: a worker without such a recipe must start against streams provisioned by hand before
// the kind existed, which have no consumer for its lane.
func TestServedLanesLeaveDocumentsToRecipesThatAskForThem(t *testing.T) {
	cfg := app.DefaultConfig()
	if got := cfg.ServedLanes(); !slices.Equal(got, []job.Kind{job.Image, job.Video}) {
		t.Errorf("default lanes without a documents recipe = %v; want [image video]", got)
	}
	cfg.Pipeline.Recipes = map[string]pipeline.Recipe{"docs": {Documents: true}}
	if got := cfg.ServedLanes(); !slices.Equal(got, []job.Kind{job.Image, job.Video, job.Document}) {
		t.Errorf("default lanes with a documents recipe = %v; want [image video document]", got)
	}
	cfg.Lanes = "image"
	if got := cfg.ServedLanes(); !slices.Equal(got, []job.Kind{job.Image}) {
		t.Errorf("--lanes image = %v; want [image]", got)
	}
	cfg.Pipeline.Recipes = nil
	cfg.Lanes = "document"
	if got := cfg.ServedLanes(); !slices.Equal(got, []job.Kind{job.Document}) {
		t.Errorf("--lanes document, listed by name = %v; want [document]", got)
	}
}
