package contracts

import "strings"

// Progress is published (core NATS, not kept) on <app>.media.optimize.progress.<mediaId> while a video
// is transcoded, at most once a second.
type Progress struct {
	MediaID string  `json:"mediaId"`
	Percent float64 `json:"percent"`
	Stage   string  `json:"stage"` // "transcoding"
}

// ProgressSubject is where the progress of mediaID is published; subscribe to ProgressWildcard for all.
func (s Subjects) ProgressSubject(mediaID string) string { return s.Progress + "." + mediaID }

// ProgressWildcard matches the progress subjects of every job.
func (s Subjects) ProgressWildcard() string { return s.Progress + ".*" }

// Wildcard matches every optimize subject of the app: requests, responses, virus events, DLQ entries
// and progress.
func (s Subjects) Wildcard() string { return strings.TrimSuffix(s.Request, "request") + ">" }
