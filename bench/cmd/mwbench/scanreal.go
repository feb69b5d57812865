package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mediaworker/mediaworker/bench"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/scanner"
	"github.com/mediaworker/mediaworker/transcoder"
)

// scanRealistic prices scanning with a signature set of realistic size and shape (sigdb.go) beside
// the dev set: clamd's load time and memory with each, and, interleaved run by run, the time and
// clamd's CPU per scan of the 100 MiB random file, of the corpus photos and of the clips, and so
// clamd's share of the CPU of an image job (the in-process transform, timed here) and of a video job
// (the bare commands of the videos phase).
func scanRealistic(b *bencher) error {
	t0 := time.Now()
	db, err := ensureSigDB(filepath.Dir(b.corpus.Dir), realisticSigCounts)
	if err != nil {
		return fmt.Errorf("making the signature set: %w", err)
	}
	made := time.Since(t0)
	var real *testenv.Clamd
	// DisableCache, as for the dev set's clamd (main.go): with its clean-file cache on, clamd answered
	// every scan after the first of the same file from the cache (an MD5 of the bytes and a lookup), and
	// the realistic set measured 4-5× faster than the dev set instead of several times slower.
	if err := b.env.Do(func() { real, err = startClamdWithDB(b.env, map[string]string{"DisableCache": "yes"}, db) }); err != nil {
		return fmt.Errorf("starting clamd with the realistic set: %w", err)
	}
	if err != nil {
		return err
	}
	defer real.Stop()
	b.logf("scan: realistic set (%d signatures, made or found in %s) loaded by clamd in %s", db.Signatures,
		made.Round(time.Millisecond), real.StartupTime.Round(time.Millisecond))

	type side struct {
		name  string
		clamd *testenv.Clamd
		pid   int
		sc    *scanner.Scanner
		mem   bench.Memory
	}
	sides := []*side{{name: "dev set (1 signature)", clamd: b.clamd}, {name: "realistic set", clamd: real}}
	for _, s := range sides {
		if s.pid, err = bench.FindProcess("--config-file=" + s.clamd.ConfigPath); err != nil {
			return err
		}
		cfg := scanner.DefaultConfig()
		cfg.Addr = s.clamd.SocketAddr
		if s.sc, err = scanner.New(cfg); err != nil {
			return err
		}
	}
	// The set is live: clamd detects both canaries with it (and not with the dev set).
	for file, name := range map[string]string{db.HashCanary: db.HashCanaryName, db.BodyCanary: db.BodyCanaryName} {
		for i, s := range sides {
			v, err := s.sc.ScanFile(b.ctx, file)
			if err != nil {
				return fmt.Errorf("scanning the canary %s: %w", filepath.Base(file), err)
			}
			if want := i == 1; v.Infected != want || (want && !strings.HasPrefix(v.Signature, name)) {
				return fmt.Errorf("canary %s with the %s: infected %v (%q), want %v", filepath.Base(file), s.name, v.Infected, v.Signature, want)
			}
		}
	}

	type item struct {
		name, kind string
		path       string
		reps       int // scans per timed run, so clamd's CPU (10 ms ticks) adds up to something measurable
	}
	items := []item{{"random bytes", "bytes", b.corpus.Scan, 1}}
	for _, p := range b.corpus.Photos {
		if p.MP() < 13 || p.Format == "jpeg" {
			items = append(items, item{p.Name, "image", p.Path, 4})
		}
	}
	for _, cl := range b.corpus.Clips {
		items = append(items, item{cl.Name, "video", cl.Path, 4})
	}
	runs := b.runs
	if b.quick {
		runs = 2
	}
	// times and cpu: per item, per side, per run (seconds per scan).
	times := map[string][][]float64{}
	cpu := map[string][][]float64{}
	for _, it := range items {
		times[it.name], cpu[it.name] = make([][]float64, len(sides)), make([][]float64, len(sides))
	}
	for _, s := range sides { // warm-up: clamd's threads started, the files in the page cache
		for _, it := range items {
			if _, err := s.sc.ScanFile(b.ctx, it.path); err != nil {
				return err
			}
		}
	}
	for run := range runs {
		for i, it := range items {
			for k := range sides {
				si := (run + i + k) % len(sides) // alternate which clamd goes first
				s := sides[si]
				c0, _ := bench.ProcessCPU(s.pid)
				t := time.Now()
				for range it.reps {
					v, err := s.sc.ScanFile(b.ctx, it.path)
					if err != nil {
						return fmt.Errorf("scanning %s with the %s: %w", it.name, s.name, err)
					}
					if v.Infected {
						return fmt.Errorf("%s reported infected with the %s: %s", it.name, s.name, v.Signature)
					}
				}
				took := time.Since(t).Seconds() / float64(it.reps)
				c1, _ := bench.ProcessCPU(s.pid)
				times[it.name][si] = append(times[it.name][si], took)
				cpu[it.name][si] = append(cpu[it.name][si], (c1-c0).Seconds()/float64(it.reps))
			}
		}
	}
	for _, s := range sides {
		if s.mem, err = bench.ReadMemory(s.pid); err != nil {
			return err
		}
	}

	// The CPU of the work the scan sits beside: the in-process transform of each photo (one run), the
	// bare commands of each clip's job (the videos phase, when it ran).
	images, err := transcoder.NewImages(transcoder.DefaultImageConfig())
	if err != nil {
		return err
	}
	jobCPU := map[string]float64{}
	for _, it := range items {
		switch it.kind {
		case "image":
			out := b.phaseDir("scan", "transform-"+it.name)
			c0 := scanSelfCPU()
			if _, err := images.Transform(b.ctx, it.path, out); err != nil {
				return fmt.Errorf("transforming %s: %w", it.name, err)
			}
			jobCPU[it.name] = (scanSelfCPU() - c0).Seconds()
			b.sizing.noteImage(it.name, jobCPU[it.name]+bench.Median(cpu[it.name][1]))
		case "video":
			b.sizing.noteClamdAdj(it.name, bench.Median(cpu[it.name][1])-bench.Median(cpu[it.name][0]))
			if c, ok := b.videoBareCPU[it.name]; ok {
				jobCPU[it.name] = c
			}
		}
	}

	var rows [][]string
	share := func(it item, si int) (string, float64) {
		j, ok := jobCPU[it.name]
		if !ok {
			return "", -1
		}
		c := bench.Median(cpu[it.name][si])
		return fmt.Sprintf("%.1f %%", 100*c/(c+j)), c / (c + j)
	}
	worstShare := map[string]float64{}
	worstShareName := map[string]string{}
	var bytesMBps [2]float64
	for _, it := range items {
		size := float64(fileSize(it.path))
		row := []string{it.name, mib(size)}
		for si := range sides {
			tm, c := bench.Median(times[it.name][si]), bench.Median(cpu[it.name][si])
			per := fmt.Sprintf("%.0f ms", 1000*c)
			if it.kind == "video" || it.kind == "bytes" {
				per = fmt.Sprintf("%.1f ms/MiB", 1000*c/(size/(1<<20)))
			}
			sh, v := share(it, si)
			if sh == "" {
				sh = "–"
			}
			row = append(row, ms(tm), fmt.Sprintf("%.0f MiB/s", size/(1<<20)/tm), per, sh)
			if si == 1 && v > worstShare[it.kind] {
				worstShare[it.kind], worstShareName[it.kind] = v, it.name
			}
			if it.kind == "bytes" {
				bytesMBps[si] = size / (1 << 20) / tm
			}
		}
		row = append(row, ratio(bench.Median(times[it.name][1])/bench.Median(times[it.name][0])))
		rows = append(rows, row)
	}
	b.rep.row("scanning", fmt.Sprintf("realistic signature set (%d signatures): scan throughput, 100 MiB of random bytes, vs the dev set", db.Signatures),
		fmt.Sprintf("%.0f vs %.0f MiB/s (scanner.ScanFile); clamd loads it in %s (dev set %s), VmRSS %s (dev set %s)",
			bytesMBps[1], bytesMBps[0], secs(real.StartupTime.Seconds()), secs(b.clamd.StartupTime.Seconds()),
			mib(float64(sides[1].mem.RSS)), mib(float64(sides[0].mem.RSS))),
		fmt.Sprintf("%.0f MiB/s", bytesMBps[1]), "reported (issue 13)", "reported")
	for _, k := range []string{"image", "video"} {
		if worstShareName[k] == "" {
			continue
		}
		what := map[string]string{"image": "of an image job's CPU (transform + scan), worst photo",
			"video": "of a video job's CPU (the bare commands + scan), worst clip"}[k]
		b.rep.row("scanning", "clamd's share, realistic signature set, "+what,
			worstShareName[k], fmt.Sprintf("%.1f %%", 100*worstShare[k]), "reported (issue 13)", "reported")
	}
	b.rep.section("Scanning: a realistic signature set",
		"Sites run ClamAV's official database, so scans are also priced with a set of realistic size and shape, generated "+
			"at bench time from a fixed seed by `bench/cmd/mwbench/sigdb.go` (cached in %s, never committed): %s, %d lines "+
			"with the two canaries. Hashes are MD5/SHA256 of random content with log-uniform file sizes of 8 KiB-16 MiB; "+
			"body and logical signatures are 2-4 static runs of 4-24 bytes (a third built from script and Windows API strings "+
			"or x86 instruction bytes, as real ones quote, the rest random) joined by `??`, `{n}`, `{n-m}` and `*`, "+
			"with nibble wildcards and `(aa|bb)` alternatives, offsets `*`, `n`, `n,m`, `EOF-n` and `EP+n`, and target types "+
			"weighted like the official set (PE 40 %%, any file 15 %%, HTML, text, OLE2, PDF, ELF, graphics). Random patterns "+
			"match real files only by chance, so this prices clamd's matching work, not its detections; a file whose MD5 is in "+
			"the set and one carrying a body signature's bytes were detected with it (and not with the dev set), so the set is live. "+
			"Caveats: the official set's patterns are more varied than these, and it adds bytecode, PE-section, container and "+
			"phishing signatures, which apply to executables, documents, archives and mail rather than to photos and videos, "+
			"and takes clamd to ~1.2–1.5 GiB (operations.md).\n\n"+
			"| clamd | signatures | start-up until PING answers | VmRSS after the runs |\n|---|---|---|---|\n"+
			"| dev set | 1 | %s | %s |\n| realistic set | %d | %s | %s |\n\n"+
			"Per scan (`scanner.ScanFile` on the unix socket, FILDES, the worker's client), the two clamds interleaved and alternated, medians "+
			"of %d runs of %d scans (1 for the 100 MiB file); *clamd CPU* is clamd's user + system CPU time per scan (per MiB "+
			"for videos and bytes), from /proc. *share*: clamd's CPU ÷ (clamd's CPU + the job's own work): for a photo the "+
			"in-process transform of it (`transcoder.Images.Transform`, one run, CPU time of this process), for a clip the "+
			"bare commands of its job in the videos phase (encode with poster output, or remux then poster).\n\n%s",
		db.Dir, realisticSigCounts, db.Signatures,
		secs(b.clamd.StartupTime.Seconds()), mib(float64(sides[0].mem.RSS)), db.Signatures, secs(real.StartupTime.Seconds()), mib(float64(sides[1].mem.RSS)),
		runs, 4,
		table([]string{"input", "size", "dev: time", "dev: throughput", "dev: clamd CPU", "dev: share",
			"realistic: time", "realistic: throughput", "realistic: clamd CPU", "realistic: share", "time realistic ÷ dev"}, rows))
	return nil
}

// scanSelfCPU is this process's user + system CPU time, all threads.
func scanSelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
