package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/bench"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/scanner"
)

// What clamd costs per image, which the worker pays and the naive script does not.
//
// clamd keeps a cache of the hashes of files it found clean and skips a file it has seen (a repeat
// costs ~50 ms of hashing for 8 MiB); every upload a site receives is new, so the benchmark's clamd
// runs with DisableCache (main.go) and each timed job pays a first scan. The largest part of a first
// scan of a photo is ClamAV's image fuzzy hash (ScanImageFuzzyHash, on by default since ClamAV 1.0):
// clamd decodes the whole picture to hash it, a second full decode beside the worker's own.
// deploy/clamav/clamd.conf turns it off; the benchmark measures ClamAV's default beside it.

// startClamdFuzzy starts a second clamd, the benchmark's own (deploy/clamav/clamd.conf) but for
// ScanImageFuzzyHash yes, ClamAV's default.
func startClamdFuzzy(env *bench.Env) (*testenv.Clamd, error) {
	var c *testenv.Clamd
	if err := env.Do(func() {
		c = testenv.StartClamdWith(env, map[string]string{"DisableCache": "yes", "ScanImageFuzzyHash": "yes"})
	}); err != nil {
		return nil, fmt.Errorf("starting clamd with image fuzzy hashing: %w", err)
	}
	return c, nil
}

// scanCost scans each input once more with the benchmark's clamd (deploy/clamav/clamd.conf,
// cache off) and with a second clamd that differs only by ScanImageFuzzyHash yes, and reports clamd's
// CPU per file: the evidence for where the worker's time goes and for the setting.
// cpuPerFile is, by input, clamd's median CPU seconds per file: deploy, fuzzy hash.
func (b imageThroughput) scanCost(cases []imageCase, other *testenv.Clamd) (_ string, cpuPerFile map[string][2]float64, _ error) {
	cpuPerFile = map[string][2]float64{}
	type daemon struct {
		addr, config string
	}
	daemons := []daemon{{b.clamd.SocketAddr, b.clamd.ConfigPath}, {other.SocketAddr, other.ConfigPath}}
	var rows [][]string
	for _, cs := range cases {
		var cells []string
		var perMiB []float64
		for _, d := range daemons {
			pid, err := bench.FindProcess("--config-file=" + d.config)
			if err != nil {
				return "", nil, err
			}
			cfg := scanner.DefaultConfig()
			cfg.Addr = d.addr
			s, err := scanner.New(cfg)
			if err != nil {
				return "", nil, err
			}
			var cpus, walls []float64
			var bytes int64
			for run := range b.runs {
				for _, p := range cs.photos {
					c0, _ := bench.ProcessCPU(pid)
					t0 := time.Now()
					if err := scanFile(b.ctx, s, p.Path); err != nil {
						return "", nil, fmt.Errorf("scanning %s: %w", p.Name, err)
					}
					c1, _ := bench.ProcessCPU(pid)
					cpus, walls = append(cpus, (c1-c0).Seconds()), append(walls, time.Since(t0).Seconds())
					if run == 0 {
						bytes += fileSize(p.Path)
					}
				}
			}
			cpu := bench.Median(cpus)
			v := cpuPerFile[cs.name]
			v[len(perMiB)] = cpu
			cpuPerFile[cs.name] = v
			perMiB = append(perMiB, cpu/(float64(bytes)/float64(len(cs.photos))/(1<<20)))
			cells = append(cells, fmt.Sprintf("%.2f s (%.0f ms wall)", cpu, 1000*bench.Median(walls)))
		}
		rows = append(rows, []string{cs.name, cs.describe(), cells[0], cells[1],
			fmt.Sprintf("%.0f / %.0f", 1000*perMiB[0], 1000*perMiB[1])})
	}
	return "clamd's CPU per file, a first scan of each (clamd's clean-file cache off, as every upload a site " +
		"receives is new), median of " + fmt.Sprint(b.runs) + " scans per file through the worker's own client on clamd's unix socket (FILDES, as the worker scans); " +
		"*deploy* is deploy/clamav/clamd.conf (`ScanImageFuzzyHash no`), *fuzzy hash* the same with ClamAV's default " +
		"`ScanImageFuzzyHash yes`. The naive " +
		"script scans nothing, so this is CPU the worker spends that the baseline does not; for the image fuzzy " +
		"hash clamd decodes each picture in full, beside the worker's own decode.\n\n" +
		table([]string{"input", "file", "clamd CPU/file, deploy", "clamd CPU/file, fuzzy hash", "ms CPU per MiB (deploy / fuzzy hash)"}, rows), cpuPerFile, nil
}

// fuzzyHashTradeOff is the section on what the shipped clamd config gives up by not computing image
// fuzzy hashes, and what computing them costs, from this run's numbers: clamd's CPU per noisy photo
// with and without, and the black box's medians at both settings.
func (b imageThroughput) fuzzyHashTradeOff(noisy string, cpuPerFile map[string][2]float64, workerOff, workerOn, scriptOff, scriptOn float64) {
	c := cpuPerFile[noisy]
	b.rep.section("Images: clamd's image fuzzy hash, the shipped config's trade-off",
		"deploy/clamav/clamd.conf ships `ScanImageFuzzyHash no`; ClamAV's default is yes, and this file measures both. "+
			"*What the hash detects.* ClamAV 0.105 added image fuzzy hash subsignatures (`fuzzy_img#<hash>`) to logical "+
			"signatures, for \"detecting images known to be used in phishing campaigns or otherwise used when distributing "+
			"malware\" (ClamAV's release notes): clamd decodes the picture, computes a perceptual hash (a clean-room "+
			"approximation of pHash) and compares it with the hashes in such signatures, so a picture that looks like a "+
			"known lure matches whatever its bytes (re-encoded, resized, new metadata). ClamAV's notes say the match is on "+
			"the exact hash (no Hamming distance) in its initial implementation; ClamAV 1.4.0 added the option to turn it off, and clamd.conf's manual "+
			"warns that with it off \"some files may no longer be detected\". How many such signatures the official "+
			"database carries is not documented per type; the dev signatures here have none, so the cost measured is the "+
			"hashing itself, which clamd does for every picture whether or not a signature could match.\n\n"+
			"*What turning it off gives up.* A logical signature that needs a `fuzzy_img` subsignature can no longer match, so an "+
			"upload that is a known phishing or malware lure picture is passed as clean and its variants are published like any "+
			"other photo's. *What stays.* `ScanImage` stays on (clamd still parses the image formats it is given), and every hash "+
			"and byte-pattern signature still applies to the upload's bytes, so an exploit or payload carried inside an image "+
			"file is looked for as before; videos are not affected (the hash is of image files, and the clips' `clamdscan` in the videos table takes as long with it on). A site that must flag "+
			"known lure pictures, such as one whose uploads are shown to other users, sets `ScanImageFuzzyHash yes` and pays for it.\n\n"+
			"*The cost, this run.* clamd's CPU per noisy 12 MP JPEG: %.2f s with it off, %.2f s on (%s); the black box "+
			"(8 noisy photos, 2 at a time), worker %s off vs %s on; the `clamdscan` + vips script %s off vs %s on.",
		c[0], c[1], ratio(c[1]/c[0]), secs(workerOff), secs(workerOn), secs(scriptOff), secs(scriptOn))
}

func scanFile(ctx context.Context, s *scanner.Scanner, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	v, err := s.Scan(ctx, f, st.Size())
	if err != nil {
		return err
	}
	if v.Infected {
		return fmt.Errorf("%s: clamd found %s", filepath.Base(path), strings.TrimSpace(v.Signature))
	}
	return nil
}
