package job

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
)

// The kinds are a registry. Each kind declares itself once, in a file of its own (kind_image.go,
// kind_video.go), and everything that has a lane per kind — jetstream's lanes, subjects and consumers,
// the worker's slots, the per-kind settings of `run` (their flags, file keys, help and docs), the
// memory budgets, the console — lists the kinds from here rather than naming them. Adding a kind is
// one more such file and its transformer.

// Spec is what a kind declares about itself.
type Spec struct {
	Kind Kind
	// Order places the kind in every list of kinds (lanes, help, docs, stream subjects): lowest first.
	Order int
	// Work is what one of its jobs does, for help: "concurrent <kind> <Work>".
	Work string
	// Lane are its lane's defaults.
	Lane LaneDefaults
	// InProcess says its transforms run inside the worker's own process (a cgo library): its memory
	// budget bounds the worker's own heap, which may be handed back to the OS, and the library must
	// load before the worker serves the kind's lane. A kind that transforms in child processes (ffmpeg)
	// has its memory there.
	InProcess bool
	// OptIn says the kind works only for requests whose recipe asks for it (documents). A worker
	// serving "all" lanes serves its lane only when one of its recipes asks for it, so a worker
	// without such a recipe needs neither the lane's consumer nor its transformer: a site that
	// provisions its streams by hand keeps starting after an upgrade that adds such a kind.
	OptIn bool
	// Progress says its jobs publish progress reports while they transform.
	Progress bool
	// Recognises reports whether an upload of this media type (an answer's metadata.mime) is of the
	// kind: how the console tells a finished job's kind.
	Recognises func(mime string) bool
	// Preview reports whether an output of its answers is the one a person is shown for it (the
	// console's preview).
	Preview func(contracts.Variant) bool
}

// LaneDefaults are a kind's lane defaults.
type LaneDefaults struct {
	// Slots is how many of its jobs an instance runs at once on a machine of cores CPUs.
	Slots func(cores int) int
	// SlotsRule says Slots in words, for the docs (whose default cannot be one machine's).
	SlotsRule string
	// AckWait and MaxAckPending are its lane consumer's own; 0 takes the shared one.
	AckWait       time.Duration
	MaxAckPending int
}

var registry []Spec

// Register adds a kind. Each kind's file calls it from init; a second kind of the same name, an empty
// or triage's name, or a kind without its lane's slots is a programming error.
func Register(s Spec) {
	switch {
	case s.Kind == Triage || strings.ContainsAny(string(s.Kind), ".*> \t,"):
		panic(fmt.Sprintf("job.Register: kind %q is not a plain token", s.Kind))
	case slices.ContainsFunc(registry, func(r Spec) bool { return r.Kind == s.Kind }):
		panic(fmt.Sprintf("job.Register: kind %q registered twice", s.Kind))
	case s.Lane.Slots == nil:
		panic(fmt.Sprintf("job.Register: kind %q declares no slots", s.Kind))
	}
	registry = append(registry, s)
	slices.SortStableFunc(registry, func(a, b Spec) int { return a.Order - b.Order })
}

// Kinds lists the registered kinds, in Order: the lanes.
func Kinds() []Kind {
	out := make([]Kind, len(registry))
	for i, s := range registry {
		out[i] = s.Kind
	}
	return out
}

// Specs lists the registered kinds' declarations, in Order.
func Specs() []Spec { return slices.Clone(registry) }

// SpecOf returns kind's declaration; false for triage and an unknown kind.
func SpecOf(k Kind) (Spec, bool) {
	for _, s := range registry {
		if s.Kind == k {
			return s, true
		}
	}
	return Spec{}, false
}

// KindsInWords names the kinds as a sentence does: "image and video".
func KindsInWords() string {
	names := make([]string, len(registry))
	for i, s := range registry {
		names[i] = string(s.Kind)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
