package job

// Kind is what a job transforms, an image or a video, and so the lane that runs it. Its value is
// what the worker shows: lane consumers' names, metrics labels, log fields and stream subjects.
type Kind string

const (
	Image Kind = "image"
	Video Kind = "video"
	// Triage is the lane before a kind is known: every request is triaged first, then routed to its
	// kind's lane. It is the empty Kind, as it always was ("" in names, "triage" where a word is shown).
	Triage Kind = ""
)
