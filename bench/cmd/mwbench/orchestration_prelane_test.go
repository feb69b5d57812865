package main

import (
	"strings"
	"testing"
)

// The phase judges the median of the rounds' own ratios (each round's two builds ran back to back),
// not the ratio of the medians, and lists every round.
func TestPrelaneReportJudgesTheRoundsRatios(t *testing.T) {
	b := &bencher{rep: &Report{}}
	rounds := []prelaneRound{
		{todayFirst: true, todayJobs: 900, preJobs: 1000, todayP99: 3.0, preP99: 3.0, todayCPU: 1, preCPU: 1},
		{todayJobs: 500, preJobs: 400, todayP99: 6.0, preP99: 4.0, todayCPU: 2, preCPU: 1},
		{todayFirst: true, todayJobs: 1100, preJobs: 1000, todayP99: 2.0, preP99: 2.0, todayCPU: 1, preCPU: 1},
	}
	prelanePhase{b: b, rounds: len(rounds)}.report(rounds, "/repo")
	if len(b.rep.Rows) != 2 {
		t.Fatalf("%d targets rows, want 2: %+v", len(b.rep.Rows), b.rep.Rows)
	}
	jobs, p99 := b.rep.Rows[0], b.rep.Rows[1]
	// Ratios 0.9, 1.25 and 1.1: the median is 1.10×, where the ratio of the medians would be 0.90×.
	if jobs.Value != "1.10×" || jobs.Status != "pass" || !strings.HasPrefix(jobs.What, "no-op jobs/s vs the pre-lane build") {
		t.Errorf("jobs/s row %+v, want 1.10× (the median of the rounds' ratios), pass", jobs)
	}
	if p99.Value != "1.00×" || p99.Status != "pass" {
		t.Errorf("p99 row %+v, want 1.00×, pass", p99)
	}
	if len(b.rep.Sections) != 1 || strings.Count(b.rep.Sections[0].Body, "\n| ") != len(rounds)+1+1 {
		t.Errorf("section: want a table with a header, %d rounds and the median:\n%v", len(rounds), b.rep.Sections)
	}
	if len(b.rep.Commands) != 1 || !strings.Contains(b.rep.Commands[0], "git worktree add --detach <tmp> "+prelaneCommit) {
		t.Errorf("commands %q lack the pre-lane checkout", b.rep.Commands)
	}

	b = &bencher{rep: &Report{}}
	rounds[0].todayJobs, rounds[1].todayJobs, rounds[2].todayP99 = 800, 300, 3.0 // ratios 0.8, 0.75, 1.1 and 1.0, 1.5, 1.5
	prelanePhase{b: b, rounds: len(rounds)}.report(rounds, "/repo")
	if jobs, p99 := b.rep.Rows[0], b.rep.Rows[1]; jobs.Status != "**MISS**" || p99.Status != "**MISS**" {
		t.Errorf("0.80× and 1.50× judged %s and %s, want both missed", jobs.Status, p99.Status)
	}
}
