package console

import (
	"sync"
	"time"
)

// Minutes is how far back the throughput chart looks.
const Minutes = 60

// Ring counts outcomes per minute for the last hour, by result. It is fed as responses arrive (and
// seeded from the responses stream at start, so a restart does not empty the chart). Safe for
// concurrent use; its zero value is ready.
type Ring struct {
	mu     sync.Mutex
	minute [Minutes]int64 // which Unix minute each slot counts
	counts [Minutes][4]int
}

// Add counts one outcome of result at t. Results other than the Result* constants are ignored, and so
// are times older than what the ring holds.
func (r *Ring) Add(t time.Time, result string) {
	k := resultIndex(result)
	if k < 0 {
		return
	}
	m := t.Unix() / 60
	i := int(m % Minutes)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.minute[i] == m:
	case r.minute[i] < m:
		r.minute[i], r.counts[i] = m, [4]int{}
	default:
		return // older than the hour the slot now holds
	}
	r.counts[i][k]++
}

// Minute is one bar of the chart.
type Minute struct {
	Start  time.Time
	Counts [4]int // indexed like Results
}

// Total is the minute's count over all results.
func (m Minute) Total() int {
	n := 0
	for _, c := range m.Counts {
		n += c
	}
	return n
}

// Series returns the last Minutes minutes up to now, oldest first.
func (r *Ring) Series(now time.Time) []Minute {
	out := make([]Minute, Minutes)
	last := now.Unix() / 60
	r.mu.Lock()
	defer r.mu.Unlock()
	for j := range out {
		m := last - Minutes + 1 + int64(j)
		out[j].Start = time.Unix(m*60, 0)
		if i := int(m % Minutes); r.minute[i] == m {
			out[j].Counts = r.counts[i]
		}
	}
	return out
}

func resultIndex(result string) int {
	for i, r := range Results {
		if r == result {
			return i
		}
	}
	return -1
}
