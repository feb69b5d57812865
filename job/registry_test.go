package job

import (
	"slices"
	"testing"
	"time"
)

// The kinds are listed from the registry, in their declared order, whatever order their files
// registered them in; a kind is declared once.
func TestRegistryListsKindsInOrder(t *testing.T) {
	if got := Kinds(); !slices.Equal(got, []Kind{Image, Video, Document}) {
		t.Fatalf("Kinds() = %v, want [image video document]", got)
	}
	if got := KindsInWords(); got != "image, video and document" {
		t.Errorf("KindsInWords() = %q", got)
	}
	if _, ok := SpecOf(Triage); ok {
		t.Error("triage has a Spec: it is no kind")
	}
	if s, ok := SpecOf(Video); !ok || s.Lane.Slots(2) != 1 || s.Lane.Slots(8) != 4 || !s.Progress {
		t.Errorf("video's Spec: %+v", s)
	}

	saved := registry
	defer func() { registry = saved }()
	Register(Spec{Kind: "sketch", Order: 15, Lane: LaneDefaults{Slots: func(int) int { return 1 }, AckWait: time.Minute}})
	if got := Kinds(); !slices.Equal(got, []Kind{Image, "sketch", Video, Document}) {
		t.Errorf("with a third kind of order 15: %v", got)
	}
	if got := KindsInWords(); got != "image, sketch, video and document" {
		t.Errorf("KindsInWords() = %q", got)
	}
	for _, bad := range []Spec{
		{Kind: Image, Lane: LaneDefaults{Slots: func(int) int { return 1 }}},  // twice
		{Kind: Triage, Lane: LaneDefaults{Slots: func(int) int { return 1 }}}, // triage's name
		{Kind: "a.b", Lane: LaneDefaults{Slots: func(int) int { return 1 }}},  // not a subject token
		{Kind: "audio"}, // no slots
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) was accepted", bad.Kind)
				}
			}()
			Register(bad)
		}()
	}
}
