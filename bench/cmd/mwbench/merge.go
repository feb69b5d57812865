package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// A partial run merged into the full run's RESULTS.md (-merge). The full benchmark takes about half an
// hour; a change to one part of it is measured by running that part's phases alone (-phases), and
// -merge writes their rows, sections and commands into the existing file in place of the old ones,
// keeping everything else as the full run wrote it. The file says so: a paragraph under the title
// names the partial run, its phases and what it replaced, and its load averages and times go under
// *Machine* and *Phases*. The *Sizing* table is left as the full run computed it (it draws on every
// phase).

// rowOwner is a group of targets rows a phase writes: its area and the start of their *what*.
type rowOwner struct{ area, prefix string }

// own declares the targets rows a phase writes (by area and the start of *what*), so that a merge
// drops the base's rows of the group even where this run words them differently.
func (r *Report) own(area string, prefixes ...string) {
	for _, p := range prefixes {
		r.owned = append(r.owned, rowOwner{area, p})
	}
}

// loadBase reads the report a partial run is merged into.
func loadBase(path string) (*Report, error) {
	md, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-merge: reading %s: %w", path, err)
	}
	base, err := parseReport(string(md))
	if err != nil {
		return nil, fmt.Errorf("-merge: %s: %w", path, err)
	}
	return base, nil
}

// parseReport reads back what Markdown writes.
func parseReport(md string) (*Report, error) {
	const title = "# mediaworker benchmark results\n\n"
	if !strings.HasPrefix(md, title) {
		return nil, fmt.Errorf("not a benchmark report (no %q title)", strings.TrimSpace(title))
	}
	lines := strings.Split(strings.TrimPrefix(md, title), "\n")
	r := &Report{}
	i := 0
	var pre []string
	for ; i < len(lines) && !strings.HasPrefix(lines[i], "## "); i++ {
		pre = append(pre, lines[i])
	}
	r.Preamble = strings.TrimSpace(strings.Join(pre, "\n"))
	if i == len(lines) || !strings.HasPrefix(lines[i], "## Targets") {
		return nil, fmt.Errorf("no targets table")
	}
	// The targets table, then maybe the failed phases.
	for i++; i < len(lines) && !strings.HasPrefix(lines[i], "## "); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "| area |"), strings.HasPrefix(l, "|---"), l == "", strings.HasPrefix(l, "**Phases that failed"):
		case strings.HasPrefix(l, "| "):
			cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(l, "| "), " |"), " | ")
			if len(cells) != 6 {
				return nil, fmt.Errorf("targets row with %d cells, want 6: %q", len(cells), l)
			}
			r.Rows = append(r.Rows, Row{cells[0], cells[1], cells[2], cells[3], cells[4], cells[5]})
		case strings.HasPrefix(l, "- "):
			r.Failures = append(r.Failures, strings.TrimPrefix(l, "- "))
		default:
			return nil, fmt.Errorf("unexpected line after the targets table: %q", l)
		}
	}
	bullets := func() []string {
		var out []string
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "## "); i++ {
			if l := lines[i]; strings.HasPrefix(l, "- ") {
				out = append(out, strings.TrimPrefix(l, "- "))
			} else if l != "" {
				out[len(out)-1] += "\n" + l // cannot happen with Markdown's output; kept rather than lost
			}
		}
		return out
	}
	for i < len(lines) {
		head := strings.TrimPrefix(lines[i], "## ")
		switch head {
		case "Scale-downs and caveats":
			r.Notes = bullets()
		case "Machine":
			r.Machine = bullets()
		case "Phases":
			r.Phases = bullets()
		case "Exact commands":
			var cmd []string
			in := false
			for i++; i < len(lines); i++ {
				switch l := lines[i]; {
				case l == "```" && !in:
					in, cmd = true, nil
				case l == "```":
					in = false
					r.Commands = append(r.Commands, strings.Join(cmd, "\n"))
				case in:
					cmd = append(cmd, l)
				}
			}
		default:
			var body []string
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], "## "); i++ {
				body = append(body, lines[i])
			}
			r.Sections = append(r.Sections, Section{head, strings.TrimSpace(strings.Join(body, "\n"))})
		}
	}
	return r, nil
}

// merged is the base report with this partial run's rows, sections, commands and notes in place of
// the old ones.
func (r *Report) merged() *Report {
	base := r.base
	stamp := r.Started.UTC().Format("2006-01-02 15:04 MST")
	m := &Report{Started: base.Started, Finished: base.Finished}

	// Rows: the base's rows this run owns (or rewrote word for word) give way to the run's rows of
	// their area, placed where the first of them was; an area the base lacks goes at the end.
	replaces := func(old Row) bool {
		for _, o := range r.owned {
			if old.Area == o.area && strings.HasPrefix(old.What, o.prefix) {
				return true
			}
		}
		return slices.ContainsFunc(r.Rows, func(n Row) bool { return n.Area == old.Area && n.What == old.What })
	}
	placed := map[string]bool{}
	place := func(area string) {
		if placed[area] {
			return
		}
		placed[area] = true
		for _, n := range r.Rows {
			if n.Area == area {
				m.Rows = append(m.Rows, n)
			}
		}
	}
	var replaced []string
	for k, old := range base.Rows {
		if replaces(old) {
			place(old.Area)
			replaced = append(replaced, fmt.Sprintf("%s: %s", old.Area, shortWhat(old.What)))
			continue
		}
		m.Rows = append(m.Rows, old)
		// New rows of this area that replaced nothing follow the area's last row.
		if last := k == len(base.Rows)-1 || base.Rows[k+1].Area != old.Area; last &&
			!slices.ContainsFunc(base.Rows, func(o Row) bool { return o.Area == old.Area && replaces(o) }) {
			place(old.Area)
		}
	}
	for _, n := range r.Rows {
		place(n.Area)
	}

	// Sections: replaced in place by title; new ones after the last replaced one (or at the end).
	used := map[string]bool{}
	at := -1
	for _, old := range base.Sections {
		if k := slices.IndexFunc(r.Sections, func(s Section) bool { return s.Title == old.Title }); k >= 0 {
			m.Sections = append(m.Sections, r.Sections[k])
			used[old.Title] = true
			at = len(m.Sections)
			continue
		}
		m.Sections = append(m.Sections, old)
	}
	var fresh []Section
	for _, s := range r.Sections {
		if !used[s.Title] {
			fresh = append(fresh, s)
		}
	}
	if at < 0 {
		at = len(m.Sections)
	}
	m.Sections = slices.Insert(m.Sections, at, fresh...)
	var titles []string
	for _, s := range r.Sections {
		titles = append(titles, "*"+s.Title+"*")
	}

	// Commands: replaced by their first line; new ones before the base's last (the run's own command line).
	firstLine := func(c string) string { l, _, _ := strings.Cut(c, "\n"); return l }
	m.Commands = slices.Clone(base.Commands)
	var extra []string
	for _, c := range r.Commands {
		if k := slices.IndexFunc(m.Commands, func(o string) bool { return firstLine(o) == firstLine(c) }); k >= 0 {
			m.Commands[k] = c
		} else {
			extra = append(extra, c)
		}
	}
	m.Commands = slices.Insert(m.Commands, max(len(m.Commands)-1, 0), extra...)

	m.Notes = slices.Clone(base.Notes)
	for _, n := range r.Notes {
		if !slices.Contains(m.Notes, n) {
			m.Notes = append(m.Notes, n)
		}
	}
	m.Failures = append(slices.Clone(base.Failures), r.Failures...)
	m.Machine = slices.Clone(base.Machine)
	for _, l := range r.Machine {
		if !slices.Contains(base.Machine, l) {
			m.Machine = append(m.Machine, "partial run of "+stamp+": "+l)
		}
	}
	m.Phases = slices.Clone(base.Phases)
	for _, p := range r.Phases {
		m.Phases = append(m.Phases, "partial run of "+stamp+": "+p)
	}
	m.Preamble = base.Preamble + "\n\n" + fmt.Sprintf("> **Partial run.** On %s, `mwbench -merge -phases %s` (%s) re-measured part of this file "+
		"and rewrote it in place; everything else is from the run(s) above. From this partial run: the targets rows %s; the sections %s; "+
		"its commands, load averages and phase times are marked *partial run* below.",
		stamp, strings.Join(r.phaseNames, ","), r.Finished.Sub(r.Started).Round(time.Second),
		quoteList(replaced, r.Rows), strings.Join(titles, ", "))
	return m
}

// quoteList names the rows a partial run wrote: those it replaced and those it added.
func quoteList(replaced []string, rows []Row) string {
	var names []string
	for _, row := range rows {
		if n := fmt.Sprintf("%s: %s", row.Area, shortWhat(row.What)); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "(none)"
	}
	s := "*" + strings.Join(names, "*, *") + "*"
	s += fmt.Sprintf(" (%d rows, in place of %d)", len(rows), len(replaced))
	return s
}

// shortWhat is the start of a row's *what*, up to its first comma, colon or parenthesis.
func shortWhat(what string) string {
	for _, sep := range []string{",", ":", " (", " ÷"} {
		if k := strings.Index(what, sep); k > 0 {
			what = what[:k]
		}
	}
	return what
}
