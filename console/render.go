package console

import (
	"fmt"
	"html/template"
	"net/url"
	"strings"
	"time"
)

var funcs = template.FuncMap{
	"ago":         ago,
	"dur":         dur,
	"pct":         func(f float64) string { return fmt.Sprintf("%.0f%%", min(max(f, 0), 1)*100) },
	"stateLabel":  stateLabel,
	"resultClass": resultClass,
	"since":       func(now, t time.Time) string { return dur(now.Sub(t)) },
	"utc":         func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"safeImg":     safeImg,
	"placeholder": placeholderURL,
	"safeColor":   safeColor,
	"overall":     overall,
	"join":        strings.Join,
	"mib":         func(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) },
	// A rescue's action as the worker logs it (gave_up), in words.
	"rescueAction": func(a string) string { return strings.ReplaceAll(a, "_", " ") },
}

// ago says how long ago t was, coarsely, as a person scans a list.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", max(int(d.Seconds()), 0))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// dur shows a job's duration: "850ms", "4.2s", "3m05s".
func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return ""
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}

func stateLabel(s State) string {
	switch s {
	case OK:
		return "OK"
	case Warn:
		return "check"
	}
	return "down"
}

// overall is the worst state of the dependencies: the page's headline light.
func overall(deps []Dependency) State {
	worst := OK
	for _, d := range deps {
		if d.State == Fail {
			return Fail
		}
		if d.State == Warn {
			worst = Warn
		}
	}
	return worst
}

// safeImg passes only http(s) URLs to an <img>: a preview URL comes from a response on the stream, and
// html/template would otherwise render an unusable one as "#ZgotmplZ".
func safeImg(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	return s
}
