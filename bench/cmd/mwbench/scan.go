package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mediaworker/mediaworker/bench"
	"github.com/mediaworker/mediaworker/scanner"
)

// scanPhase compares the worker's clamd client (scanner.Scanner.ScanFile) with clamdscan on the same
// 100 MiB file and the same clamd: over TCP (INSTREAM) with clamdscan --stream, and on clamd's unix
// socket (FILDES, the file handed over) with clamdscan --fdpass; it times other chunk sizes and the
// path mode (clamd reads the file by name) for the recommendations; then prices scans with a realistic
// signature set beside the dev one (scanreal.go).
func scanPhase(b *bencher) error {
	file := b.corpus.Scan
	size := fileSize(file)
	u, err := url.Parse(b.clamd.Addr)
	if err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return err
	}
	dir := b.phaseDir("scan", "conf")
	conf := filepath.Join(dir, "clamdscan.conf")
	// clamdscan reads clamd's address from a clamd.conf; it needs only these two lines.
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("TCPSocket %s\nTCPAddr %s\n", port, host)), 0o644); err != nil {
		return err
	}
	clamdscan := []string{"--config-file=" + conf, "--stream", "--no-summary", file}
	// The same clamd on its unix socket: clamdscan uses LocalSocket when its config names one.
	sockConf := filepath.Join(dir, "clamdscan-unix.conf")
	sock := strings.TrimPrefix(b.clamd.SocketAddr, "unix://")
	if err := os.WriteFile(sockConf, []byte("LocalSocket "+sock+"\n"), 0o644); err != nil {
		return err
	}
	fdpass := []string{"--config-file=" + sockConf, "--fdpass", "--no-summary", file}
	b.rep.Machine = append(b.rep.Machine, "clamdscan: "+firstLine("clamdscan", "--config-file="+conf, "--version"))

	scanWith := func(chunk int) func() error { return clientScan(b.ctx, b.clamd.Addr, chunk, file) }
	def := scanner.DefaultConfig().ChunkSize
	type method struct {
		name string
		fn   func() error
		runs int
	}
	main := []method{
		{fmt.Sprintf("worker over TCP: scanner.ScanFile (INSTREAM, %d KiB chunks, the default)", def>>10), scanWith(0), 5},
		{"clamdscan --stream", func() error { return runQuiet(b.ctx, nil, "clamdscan", clamdscan...) }, 5},
		{"worker on the unix socket: scanner.ScanFile (FILDES)", clientScan(b.ctx, b.clamd.SocketAddr, 0, file), 5},
		{"clamdscan --fdpass", func() error { return runQuiet(b.ctx, nil, "clamdscan", fdpass...) }, 5},
	}
	extra := []method{
		{"scanner.ScanFile, 1 KiB chunks (go-clamd's size)", scanWith(1 << 10), 3},
		{"scanner.ScanFile, 64 KiB chunks", scanWith(64 << 10), 3},
		{"scanner.ScanFile, 1 MiB chunks", scanWith(1 << 20), 3},
		{"scanner.ScanFile, 4 MiB chunks", scanWith(4 << 20), 3},
		{"path mode: zSCAN <path> (clamd reads the file; needs a shared filesystem)", func() error { return scanPath(b.ctx, host+":"+port, file) }, 3},
	}
	if b.quick {
		for i := range main {
			main[i].runs = 3
		}
		for i := range extra {
			extra[i].runs = 2
		}
	}
	times := map[string][]float64{}
	all := append(main, extra...)
	// Warm-up: the file into the page cache, clamd's threads started.
	if err := all[0].fn(); err != nil {
		return err
	}
	for run := 0; ; run++ {
		ran := false
		for k := range all {
			m := all[(k+run)%len(all)]
			if len(times[m.name]) >= m.runs {
				continue
			}
			ran = true
			t := time.Now()
			if err := m.fn(); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			times[m.name] = append(times[m.name], time.Since(t).Seconds())
		}
		if !ran {
			break
		}
	}
	mbps := func(name string) float64 { return float64(size) / (1 << 20) / bench.Median(times[name]) }
	worker, ref := mbps(main[0].name), mbps(main[1].name)
	b.rep.row("scanning", "client throughput ÷ `clamdscan --stream`, same 100 MiB file",
		fmt.Sprintf("%.0f vs %.0f MiB/s", worker, ref), ratio(worker/ref), "≥ 0.9×", atLeast(worker/ref, 0.9))
	inPlace, fdRef := mbps(main[2].name), mbps(main[3].name)
	b.rep.row("scanning", "client throughput on clamd's unix socket (FILDES, as `scripts/run.sh` runs the worker) ÷ `clamdscan --fdpass`",
		fmt.Sprintf("%.0f vs %.0f MiB/s; FILDES ÷ INSTREAM, both the worker's client: %s", inPlace, fdRef, ratio(inPlace/worker)),
		ratio(inPlace/fdRef), "≥ 0.9×", atLeast(inPlace/fdRef, 0.9))
	var rows [][]string
	for _, m := range all {
		rows = append(rows, []string{m.name, fmt.Sprintf("%d", len(times[m.name])), secs(bench.Median(times[m.name])),
			fmt.Sprintf("%.0f MiB/s", mbps(m.name)), ratio(mbps(m.name) / ref)})
	}
	b.rep.section("Scanning",
		"100 MiB of incompressible bytes, the same clamd (`deploy/clamav/clamd.conf` with the dev signatures, started "+
			"by `internal/testenv.StartClamd`), methods interleaved, medians.\n\n%s",
		table([]string{"client", "runs", "time", "throughput", "vs clamdscan --stream"}, rows))
	b.rep.command("# scanning baselines (clamdscan.conf holds only TCPSocket %s / TCPAddr %s; clamdscan-unix.conf only LocalSocket %s):\nclamdscan %s\nclamdscan %s",
		port, host, sock, strings.Join(clamdscan, " "), strings.Join(fdpass, " "))
	return scanRealistic(b)
}

// clientScan returns a scan of file with the worker's client at addr (chunk: INSTREAM chunk size, 0 for
// the default); on a unix socket the client hands clamd the file (FILDES).
func clientScan(ctx context.Context, addr string, chunk int, file string) func() error {
	cfg := scanner.DefaultConfig()
	cfg.Addr = addr
	if chunk > 0 {
		cfg.ChunkSize = chunk
	}
	return func() error {
		s, err := scanner.New(cfg)
		if err != nil {
			return err
		}
		v, err := s.ScanFile(ctx, file)
		if err != nil {
			return err
		}
		if v.Infected {
			return fmt.Errorf("random bytes reported infected: %s", v.Signature)
		}
		return nil
	}
}

// scanPath asks clamd to scan a file by path (zSCAN), as a worker sharing clamd's filesystem could.
func scanPath(ctx context.Context, addr, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	dl, _ := ctx.Deadline()
	if err := conn.SetDeadline(dl); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("zSCAN " + path + "\x00")); err != nil {
		return err
	}
	reply, err := bufio.NewReader(conn).ReadString(0)
	if err != nil {
		return fmt.Errorf("reading zSCAN reply: %w", err)
	}
	reply = strings.TrimSuffix(reply, "\x00")
	if reply != path+": OK" {
		return fmt.Errorf("zSCAN replied %q", reply)
	}
	return nil
}
