package pipeline

// The upload is sniffed once per job: as soon as it is downloaded (for the video probe that runs
// beside the scan), from the head the download kept in memory; detect and the kind's handler take that
// answer instead of opening the file again. (Triage's sniff is of another delivery: a ranged read
// before the job is routed to its lane.)

// sniffed is what the sniff found.
type sniffed struct {
	mime string
	kind MediaKind
	err  error
}

// sniff returns what the downloaded upload is, sniffing it the first time only: from the head the
// download kept when it holds all detection reads, otherwise from the file.
func (j *job) sniff() (string, MediaKind, error) {
	if j.sniffed == nil {
		var s sniffed
		if j.head != nil && int64(len(j.head.buf)) == min(j.info.Size, sniffBytes) {
			s.mime, s.kind, s.err = DetectBytes(j.head.buf) // what Detect would read back from the file
		} else {
			s.mime, s.kind, s.err = Detect(j.input)
		}
		j.sniffed = &s
	}
	return j.sniffed.mime, j.sniffed.kind, j.sniffed.err
}
