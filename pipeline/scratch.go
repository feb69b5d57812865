package pipeline

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// ScratchPrefix starts the name of every per-job scratch dir, so a restarted worker can find and remove
// the ones a crashed run left behind.
const ScratchPrefix = "mw-job-"

// scratchDirs hands out the jobs' scratch dirs. Making a dir and removing it are journaled metadata
// writes: on ext4 under load they were most of a small job's time (issue 23's session: ~0.3 ms CPU per
// job; a syscall trace of the no-op benchmark on a busy machine: 2.6 ms of 3.6 ms blocked in the
// file system per job went to mkdir and rmdir). So a dir a job leaves empty is kept for the next job
// while other jobs still run (a request in triage counts: it will want a dir next), and the last job
// to end removes every kept dir: between bursts, and whenever no job runs, no mw-job-* dir exists, as
// before. A dir is kept only when it is verifiably
// empty (a job's files are removed one by one; anything a tool left makes the dir go whole), so a job
// never sees another's files: every job starts in an empty dir, fresh or emptied.
type scratchDirs struct {
	root string

	mu     sync.Mutex
	active int      // jobs running: dirs handed out and not yet given back, and requests in triage
	idle   []string // empty dirs kept for the next job while active > 0
}

// take returns an empty dir for one job: a kept one, or a new one.
func (s *scratchDirs) take() (string, error) {
	s.mu.Lock()
	s.active++
	if n := len(s.idle); n > 0 {
		dir := s.idle[n-1]
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		return dir, nil
	}
	s.mu.Unlock()
	// Scratch paths never come from keys: a fresh dir with fixed file names.
	dir, err := os.MkdirTemp(s.root, ScratchPrefix)
	if err != nil {
		s.give("", false)
		return "", err
	}
	return dir, nil
}

// join counts a request in triage as a running job until the returned func is called: the next job
// that wants a dir is likely its own, so the kept dirs stay.
func (s *scratchDirs) join() (leave func()) {
	s.mu.Lock()
	s.active++
	s.mu.Unlock()
	return func() { s.give("", false) }
}

// release empties j's dir and gives it back (j.dir is cleared).
func (s *scratchDirs) release(j *job) {
	dir := j.dir
	j.dir = ""
	// The files the job knows of one by one: on a small job the walk of RemoveAll (open, read the dir,
	// close, a failed unlink of the dir) was a measurable part of its system calls.
	_ = os.Remove(j.input)
	for _, o := range j.outs {
		if filepath.Dir(o.path) == dir {
			_ = os.Remove(o.path)
		}
	}
	s.mu.Lock()
	others := s.active > 1
	s.mu.Unlock()
	// Whether the dir is empty matters only when it may be kept; a dir that goes tells by itself
	// (give: rmdir fails on anything left in it).
	s.give(dir, others && isEmptyDir(dir))
}

// give takes back a dir ("" for none); empty says it was found empty, and only such a dir is kept,
// while other jobs run. The last job to end removes its dir with every kept one.
func (s *scratchDirs) give(dir string, empty bool) {
	s.mu.Lock()
	s.active--
	if dir != "" && empty && s.active > 0 {
		s.idle = append(s.idle, dir)
		s.mu.Unlock()
		return
	}
	var remove []string
	if s.active == 0 {
		remove, s.idle = s.idle, nil
	}
	s.mu.Unlock()
	if dir != "" && os.Remove(dir) != nil {
		_ = os.RemoveAll(dir) // what a tool left of its own goes too
	}
	for _, d := range remove {
		_ = os.Remove(d)
	}
}

// isEmptyDir reports whether dir holds nothing (false when it cannot be read).
func isEmptyDir(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	return errors.Is(err, io.EOF)
}
