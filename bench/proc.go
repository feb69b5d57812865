package bench

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Memory is a process's resident set as /proc/<pid>/status reports it.
type Memory struct {
	RSS  int64 // VmRSS: resident now, bytes
	HWM  int64 // VmHWM: the most ever resident, bytes
	Anon int64 // RssAnon: the private part (heap, stacks)
	File int64 // RssFile: pages of mapped files (the executable, shared libraries), shareable and reclaimable
}

// ReadMemory reads VmRSS, VmHWM, RssAnon and RssFile of pid.
func ReadMemory(pid int) (Memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, fmt.Errorf("reading memory of pid %d: %w", pid, err)
	}
	defer f.Close()
	var m Memory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		dst := map[string]*int64{"VmRSS": &m.RSS, "VmHWM": &m.HWM, "RssAnon": &m.Anon, "RssFile": &m.File}[k]
		if !ok || dst == nil {
			continue
		}
		fields := strings.Fields(v) // "123456 kB"
		if len(fields) != 2 || fields[1] != "kB" {
			return Memory{}, fmt.Errorf("reading memory of pid %d: unexpected %s line %q", pid, k, v)
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("reading memory of pid %d: %w", pid, err)
		}
		*dst = kb << 10
	}
	if err := sc.Err(); err != nil {
		return Memory{}, fmt.Errorf("reading memory of pid %d: %w", pid, err)
	}
	if m.RSS == 0 && m.HWM == 0 {
		return Memory{}, fmt.Errorf("reading memory of pid %d: no VmRSS/VmHWM (a zombie?)", pid)
	}
	return m, nil
}

// Sampler polls a process's VmRSS at a fixed interval and keeps the largest value seen. VmHWM is
// exact but only ever grows over the process's life; the sampler sees the peak of one window.
type Sampler struct {
	pid  int
	stop chan struct{}
	done chan struct{}

	mu  sync.Mutex
	max int64
	n   int
}

// StartSampler starts polling pid every interval until Stop.
func StartSampler(pid int, interval time.Duration) *Sampler {
	s := &Sampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				s.sample()
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *Sampler) sample() {
	m, err := ReadMemory(s.pid)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.max = max(s.max, m.RSS)
	s.n++
	s.mu.Unlock()
}

// Stop ends sampling and returns the largest VmRSS seen and the number of samples. Idempotent.
func (s *Sampler) Stop() (maxRSS int64, samples int) {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max, s.n
}

// RSSByMapping sums the resident bytes of pid's mappings by what they map (a file path, or "" for
// anonymous memory), from /proc/<pid>/smaps.
func RSSByMapping(pid int) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, fmt.Errorf("reading mappings of pid %d: %w", pid, err)
	}
	defer f.Close()
	out := map[string]int64{}
	name := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		switch {
		case len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			name = ""
			if len(fields) >= 6 {
				name = strings.Join(fields[5:], " ")
			}
		case len(fields) == 3 && fields[0] == "Rss:":
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err == nil {
				out[name] += kb << 10
			}
		}
	}
	return out, sc.Err()
}

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat: 100 on every Linux port Go
// supports.
const clockTicks = 100

// ProcessCPU returns the user + system CPU time pid has used so far (its threads, not its children).
func ProcessCPU(pid int) (time.Duration, error) { return processCPU(pid, false) }

// ProcessTreeCPU is ProcessCPU plus the CPU time of pid's children that it has waited for (and, in
// turn, of theirs): for the worker, every ffmpeg and ffprobe run that has finished.
func ProcessTreeCPU(pid int) (time.Duration, error) { return processCPU(pid, true) }

func processCPU(pid int, children bool) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading cpu time of pid %d: %w", pid, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces: count fields after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("reading cpu time of pid %d: malformed stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// After ')': state is field 3, so utime (field 14) is f[11], stime f[12], cutime f[13], cstime f[14].
	if len(f) < 15 {
		return 0, fmt.Errorf("reading cpu time of pid %d: short stat", pid)
	}
	n := 2
	if children {
		n = 4
	}
	var ticks int64
	for _, v := range f[11 : 11+n] {
		t, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading cpu time of pid %d: malformed stat", pid)
		}
		ticks += t
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// FindProcess returns the pid of the first process whose command line contains s.
func FindProcess(s string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(cmd), s) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process with %q in its command line", s)
}
