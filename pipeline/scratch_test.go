package pipeline

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A job's scratch dir is kept for the next job only while other jobs run, only when the job left it
// empty, and the last job to end removes every kept dir: a job never meets another's files, and no
// mw-job-* dir is left once the jobs are done.
func TestScratchDirsAreReusedOnlyEmptyAndOnlyWhileJobsOverlap(t *testing.T) {
	root := t.TempDir()
	s := &scratchDirs{root: root}
	jobIn := func(t *testing.T, files ...string) *job {
		t.Helper()
		dir, err := s.take()
		if err != nil {
			t.Fatal(err)
		}
		if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
			t.Fatalf("job got %s holding %v (%v), want an empty dir", dir, entries, err)
		}
		j := &job{dir: dir, input: filepath.Join(dir, "input")}
		for _, f := range append([]string{"input"}, files...) {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("upload of another tenant"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		j.outs = []output{{path: filepath.Join(dir, "thumb.webp")}}
		return j
	}
	left := func() []string {
		entries, err := os.ReadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}

	a, b := jobIn(t, "thumb.webp"), jobIn(t)
	aDir := a.dir
	s.release(a) // b still runs: a's emptied dir is kept
	if got := left(); len(got) != 2 {
		t.Fatalf("after one of two jobs ended: %v, want both dirs (one kept for the next job)", got)
	}
	c := jobIn(t, "tool.log") // gets a's dir, emptied; leaves a file nobody knows of
	if c.dir != aDir {
		t.Errorf("the next job got %s, want the kept %s", c.dir, aDir)
	}
	cDir := c.dir
	s.release(c) // not empty: removed whole, not kept
	if _, err := os.Stat(cDir); !os.IsNotExist(err) {
		t.Errorf("a dir a tool left a file in was kept (%v)", err)
	}
	d := jobIn(t)
	if d.dir == cDir {
		t.Errorf("the next job got the dir that held another job's file")
	}
	want := []string{filepath.Base(b.dir), filepath.Base(d.dir)}
	slices.Sort(want)
	s.release(b)
	if got := left(); !slices.Equal(got, want) {
		t.Errorf("while one job runs: %v, want its dir and the one kept (%v)", got, want)
	}
	leave := s.join() // a request in triage: a job too
	s.release(d)
	if got := left(); len(got) != 2 {
		t.Errorf("while a request is in triage: %v, want the two kept dirs", got)
	}
	leave() // the last job: every kept dir goes
	if got := left(); len(got) != 0 {
		t.Errorf("after every job ended, %s holds %v", root, got)
	}
}
