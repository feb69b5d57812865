package job

// Kind is what a job transforms (an image, a video: registry.go lists them), and so the lane that
// runs it. Its value is what the worker shows: lane consumers' names, metrics labels, log fields and
// stream subjects.
type Kind string

// Triage is the lane before a kind is known: every request is triaged first, then routed to its
// kind's lane. It is the empty Kind, as it always was ("" in names, "triage" where a word is shown).
const Triage Kind = ""
