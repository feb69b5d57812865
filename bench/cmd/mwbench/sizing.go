package main

import (
	"fmt"
	"strings"
)

// The sizing table (issue 13, item 5): what one core delivers per kind of input and what a slot
// needs in memory, from numbers the phases measured in this run, so a site can size a box and its
// slot counts. docs/operations.md ("Sizing") quotes it with the run's date.

// sizingData collects the table's inputs as the phases run; a phase that did not run leaves its
// rows out.
type sizingData struct {
	imageCPU  map[string]float64 // photo → CPU s per image: the in-process transform + clamd's scan with the realistic set (scan phase)
	videoJob  map[string]videoSizing
	clamdAdj  map[string]float64 // clip → clamd CPU per scan with the realistic set − with the dev set (scan phase)
	ffmpegRSS map[string]int64   // clip → the largest peak RSS of its bare encode or remux runs (videos phase)
	// From the memory phase: the worker's VmRSS idle and its VmHWM over the mixed corpus, default slots.
	idleRSS, mixedHWM int64
	imageSlots        int
}

type videoSizing struct {
	kind string  // encode or remux
	cpu  float64 // CPU s of the worker's job: the worker, its ffmpeg/ffprobe runs and clamd (dev set)
}

func (s *sizingData) noteFFmpegRSS(clip string, rss int64) {
	if s.ffmpegRSS == nil {
		s.ffmpegRSS = map[string]int64{}
	}
	s.ffmpegRSS[clip] = max(s.ffmpegRSS[clip], rss)
}

func (s *sizingData) noteVideoJob(clip, kind string, cpu float64) {
	if s.videoJob == nil {
		s.videoJob = map[string]videoSizing{}
	}
	s.videoJob[clip] = videoSizing{kind, cpu}
}

func (s *sizingData) noteImage(photo string, cpu float64) {
	if s.imageCPU == nil {
		s.imageCPU = map[string]float64{}
	}
	s.imageCPU[photo] = cpu
}

func (s *sizingData) noteClamdAdj(clip string, d float64) {
	if s.clamdAdj == nil {
		s.clamdAdj = map[string]float64{}
	}
	s.clamdAdj[clip] = d
}

// section writes the table into rep, in the corpus's order, if any phase fed it.
func (s *sizingData) section(rep *Report, corpus Corpus) {
	var rows [][]string
	perSlot := "–"
	if s.imageSlots > 0 && s.mixedHWM > s.idleRSS {
		perSlot = fmt.Sprintf("%s (worker VmHWM − idle ÷ %d image slots)", mib(float64(s.mixedHWM-s.idleRSS)/float64(s.imageSlots)), s.imageSlots)
	}
	for _, p := range corpus.Photos {
		cpu, ok := s.imageCPU[p.Name]
		if !ok || cpu <= 0 {
			continue
		}
		rows = append(rows, []string{fmt.Sprintf("%s photo, %d×%d", strings.ToUpper(p.Format), p.W, p.H), "three WebP variants",
			fmt.Sprintf("%.2f CPU s per image", cpu), fmt.Sprintf("**%.2f images/s**", 1/cpu), perSlot})
	}
	for _, cl := range corpus.Clips {
		j, ok := s.videoJob[cl.Name]
		if !ok || j.cpu <= 0 {
			continue
		}
		cpu := j.cpu + s.clamdAdj[cl.Name]
		path := "transcode to H.264/AAC"
		if j.kind == "remux" {
			path = "remux (fast path)"
		}
		mem := "–"
		if r := s.ffmpegRSS[cl.Name]; r > 0 {
			mem = fmt.Sprintf("%s (ffmpeg's peak RSS, its own process)", mib(float64(r)))
		}
		rows = append(rows, []string{fmt.Sprintf("%s, %d s", cl.Name, clipSeconds), path,
			fmt.Sprintf("%.2f CPU s per clip", cpu), fmt.Sprintf("**%.1f video-s/s**", float64(clipSeconds)/cpu), mem})
	}
	if len(rows) == 0 {
		return
	}
	rep.section("Sizing",
		"What one core delivers, from the CPU time (user + system) measured in this run: a core gives one CPU-second per "+
			"second, so *per core* = 1 ÷ the CPU time of one item, which holds on a loaded or a larger machine where wall "+
			"time does not. Images: the in-process transform of the photo (`transcoder.Images.Transform`, the scan phase) "+
			"plus clamd's scan of it with the realistic signature set; the worker's own share (download, uploads, NATS) "+
			"comes on top (compare *CPU s/img* worker ÷ in-process in the images table). Videos: the worker's whole job "+
			"(videos phase: the worker process, its ffmpeg/ffprobe runs and clamd), with clamd's CPU for the clip switched "+
			"from the dev set to the realistic set (scan phase). *Memory per slot*: for images, the worker's peak over the "+
			"mixed corpus (memory phase) above its idle RSS, per image slot; for videos, ffmpeg's peak RSS (its own "+
			"process, bounded by `--video-max-memory`). To size a box: image throughput ≈ cores × images/s of the "+
			"inputs you expect; video ≈ cores × video-s/s; memory ≈ idle worker + image slots × its per-slot figure + "+
			"video slots × ffmpeg's, plus clamd (its RSS with the realistic set is in the scan section; with the official "+
			"database it holds ~1.2–1.5 GiB, twice that during a reload, as operations.md says). docs/operations.md (\"Sizing\") quotes this table with the date of the run.\n\n%s",
		table([]string{"input", "work", "CPU", "per core", "memory per slot"}, rows))
}
