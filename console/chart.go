package console

import (
	"fmt"
	"time"
)

// The throughput chart is inline SVG drawn here, on the server: a picture that needs no script and no
// chart library. Its viewBox is fixed; CSS scales it to the page's width.
const (
	chartW   = 600
	chartH   = 150
	barPitch = chartW / Minutes
	barWidth = barPitch - 2
)

type chartSeg struct {
	Y, H   int
	Class  string
	Result string
	Count  int
}

type chartBar struct {
	X     int
	Title string
	Segs  []chartSeg
}

type chart struct {
	W, H, BarW int
	Bars       []chartBar
	Max        int         // the y axis' top, a round number
	Grid       []chartGrid // horizontal lines
	Totals     []chartTotal
	Sum        int
	PerMinute  string // average over the hour
	From, To   string
}

type chartGrid struct {
	Y     int
	Label string
}

type chartTotal struct {
	Result, Class string
	Count         int
}

func buildChart(series []Minute) chart {
	c := chart{W: chartW, H: chartH, BarW: barWidth}
	peak := 0
	totals := make([]int, len(Results))
	for _, m := range series {
		peak = max(peak, m.Total())
		for k, n := range m.Counts {
			totals[k] += n
		}
	}
	c.Max = niceCeil(peak)
	for _, frac := range []int{1, 2} { // half and full height
		v := c.Max * frac / 2
		c.Grid = append(c.Grid, chartGrid{Y: chartH - chartH*v/c.Max, Label: fmt.Sprint(v)})
	}
	for j, m := range series {
		b := chartBar{X: j*barPitch + 1, Title: m.Start.UTC().Format("15:04") + " UTC"}
		y := chartH
		for k, n := range m.Counts {
			if n == 0 {
				continue
			}
			h := max(chartH*n/c.Max, 2)
			y -= h
			b.Segs = append(b.Segs, chartSeg{Y: y, H: h, Class: resultClass(Results[k]), Result: Results[k], Count: n})
			b.Title += fmt.Sprintf(", %d %s", n, Results[k])
		}
		c.Bars = append(c.Bars, b)
	}
	for k, n := range totals {
		c.Totals = append(c.Totals, chartTotal{Result: Results[k], Class: resultClass(Results[k]), Count: n})
		c.Sum += n
	}
	c.PerMinute = fmt.Sprintf("%.1f", float64(c.Sum)/Minutes)
	if len(series) > 0 {
		c.From = series[0].Start.UTC().Format("15:04")
		c.To = series[len(series)-1].Start.Add(time.Minute).UTC().Format("15:04")
	}
	return c
}

// niceCeil rounds a peak up to 1, 2 or 5 times a power of ten (at least 2), so grid labels read well.
func niceCeil(n int) int {
	if n <= 2 {
		return 2
	}
	for p := 1; ; p *= 10 {
		for _, f := range []int{1, 2, 5} {
			if f*p >= n {
				return f * p
			}
		}
	}
}

// resultClass is the CSS class of a result ("gave up" has a space).
func resultClass(result string) string {
	switch result {
	case ResultSuccess:
		return "r-success"
	case ResultFailed:
		return "r-failed"
	case ResultInfected:
		return "r-infected"
	case ResultGaveUp:
		return "r-gaveup"
	}
	return "r-unknown"
}
