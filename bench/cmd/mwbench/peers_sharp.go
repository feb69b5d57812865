package main

// The sharp peer of the peers phase (peers.go): installed from npm into the corpus cache, run as a
// Node service fed JSON jobs on stdin.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

//go:embed peers/sharp/package.json peers/sharp/package-lock.json peers/sharp/peer.js
var peerFiles embed.FS

// installSharp writes the peer's files into a cache directory named by their hash and installs the
// pinned packages there once. It returns the directory and node's path.
func (b *bencher) installSharp(cacheRoot string) (dir, node string, err error) {
	h := sha256.New()
	names := []string{"package.json", "package-lock.json", "peer.js"}
	data := map[string][]byte{}
	for _, n := range names {
		d, err := peerFiles.ReadFile("peers/sharp/" + n)
		if err != nil {
			return "", "", err
		}
		data[n] = d
		h.Write(d)
	}
	dir = filepath.Join(cacheRoot, "peer-sharp-"+hex.EncodeToString(h.Sum(nil))[:12])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), data[n], 0o644); err != nil {
			return "", "", err
		}
	}
	err = b.env.Do(func() { node = testenv.NPMPackages(b.env, dir, "sharp/package.json") })
	return dir, node, err
}

// sharpPeer is the running Node service.
type sharpPeer struct {
	cmd      *exec.Cmd
	in       io.WriteCloser
	mu       sync.Mutex
	waiting  map[int]chan peerAnswer
	next     int
	versions string
	done     chan struct{}
}

type peerVariant struct {
	Name   string `json:"name"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	Size   int64  `json:"size"`
}

type peerAnswer struct {
	ID       int           `json:"id"`
	Variants []peerVariant `json:"variants"`
	Error    string        `json:"error"`
}

func startSharpPeer(ctx context.Context, node, dir string, cfg transcoder.ImageConfig, inflight int, scan clamdScan, logPath string) (*sharpPeer, error) {
	type variant struct {
		Name    string `json:"name"`
		Size    int    `json:"size"`
		Quality int    `json:"quality"`
	}
	conf, _ := json.Marshal(map[string]any{"inflight": inflight, "effort": cfg.Effort, "scanConf": scan.conf,
		"variants": []variant{{"high", cfg.High, cfg.QualityHigh}, {"medium", cfg.Medium, cfg.QualityMedium}, {"low", cfg.Low, cfg.QualityLow}}})
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, node, "peer.js", string(conf))
	cmd.Dir = dir
	cmd.Stderr = logf
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the sharp peer: %w", err)
	}
	p := &sharpPeer{cmd: cmd, in: in, waiting: map[int]chan peerAnswer{}, done: make(chan struct{})}
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		_ = cmd.Wait()
		return nil, fmt.Errorf("the sharp peer exited before it was ready: %s", tailFileText(logPath))
	}
	var hello struct {
		Versions    map[string]string `json:"versions"`
		Concurrency int               `json:"concurrency"`
	}
	if err := json.Unmarshal(sc.Bytes(), &hello); err != nil {
		return nil, fmt.Errorf("the sharp peer said %q: %w", sc.Text(), err)
	}
	p.versions = fmt.Sprintf("sharp %s, its libvips %s, sharp.concurrency() %d", hello.Versions["sharp"], hello.Versions["vips"], hello.Concurrency)
	go func() {
		defer close(p.done)
		for sc.Scan() {
			var a peerAnswer
			if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
				continue
			}
			p.mu.Lock()
			ch := p.waiting[a.ID]
			delete(p.waiting, a.ID)
			p.mu.Unlock()
			if ch != nil {
				ch <- a
			}
		}
	}()
	return p, nil
}

func (p *sharpPeer) pid() int { return p.cmd.Process.Pid }

// submit sends one job; the answer arrives on the channel.
func (p *sharpPeer) submit(src, out string) (<-chan peerAnswer, error) {
	ch := make(chan peerAnswer, 1)
	p.mu.Lock()
	p.next++
	id := p.next
	p.waiting[id] = ch
	p.mu.Unlock()
	line, _ := json.Marshal(map[string]any{"id": id, "src": src, "out": out})
	if _, err := p.in.Write(append(line, '\n')); err != nil {
		return nil, fmt.Errorf("sending a job to the sharp peer: %w", err)
	}
	return ch, nil
}

func (p *sharpPeer) wait(ctx context.Context, ch <-chan peerAnswer) (peerAnswer, error) {
	select {
	case a := <-ch:
		if a.Error != "" {
			return a, fmt.Errorf("sharp peer: %s", a.Error)
		}
		return a, nil
	case <-p.done:
		return peerAnswer{}, fmt.Errorf("the sharp peer exited")
	case <-ctx.Done():
		return peerAnswer{}, ctx.Err()
	}
}

// stop closes the peer's stdin (it exits when its queue is empty) and waits.
func (p *sharpPeer) stop() {
	_ = p.in.Close()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
	}
	_ = p.cmd.Wait()
}

func tailFileText(path string) string {
	b, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}
