package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// What the run ran on, for the report's Machine section: the hardware, the tools' versions and the
// commit at the start, and the load at both ends (a busy machine explains slow numbers).

// machineAtStart returns the lines that describe the machine, the tools and the worker binary bin.
func machineAtStart(bin string) []string {
	cpu := "unknown"
	if s, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(s), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := "unknown"
	if s, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(s), "\n") {
			if strings.HasPrefix(l, "MemTotal:") {
				var kb int64
				fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(l, "MemTotal:")), "%d", &kb)
				mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	commit := strings.TrimSpace(firstLine("git", "rev-parse", "--short", "HEAD"))
	if out, _ := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); len(out) > 0 {
		commit += " (with uncommitted changes)"
	}
	return []string{
		fmt.Sprintf("nproc: %d; CPU: %s; memory: %s; kernel %s", runtime.NumCPU(), cpu, mem, strings.TrimSpace(string(kernel))),
		"load average (1/5/15 min) at the start: " + loadAverage(),
		"go: " + firstLine("go", "version"),
		"ffmpeg: " + firstLine("ffmpeg", "-hide_banner", "-version"),
		"vips: " + firstLine("vips", "--version"),
		"clamd: " + firstLine("clamd", "--version") + " (dev signatures only: EICAR; a full database scans slower, for the worker and clamdscan alike)",
		"mediaworker: " + firstLine(bin, "version") + ", commit " + commit,
	}
}

// loadAtEnd returns the line with the load average at the end of the run.
func loadAtEnd() string {
	return "load average (1/5/15 min) at the end: " + loadAverage()
}

func loadAverage() string {
	s, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(s))[:3], " ")
}

// firstLine runs a command and returns the first line of its output (its version, say).
func firstLine(name string, args ...string) string {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil && len(out) == 0 {
		return name + ": " + err.Error()
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
