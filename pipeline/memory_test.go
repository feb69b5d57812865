package pipeline

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/membudget"
	"github.com/mediaworker/mediaworker/scanner"
	"github.com/mediaworker/mediaworker/transcoder"
)

// gatedImages is the real image transformer (libvips) that counts the decodes in flight and holds
// the first one until the test opens its gate, so the second job arrives while the first one holds
// its memory.
type gatedImages struct {
	*transcoder.Images
	gate          chan struct{}
	first         atomic.Bool
	running, most atomic.Int64
}

func (g *gatedImages) TransformRecipe(ctx context.Context, src, out string, specs []transcoder.ImageVariantSpec) (transcoder.ImageResult, error) {
	n := g.running.Add(1)
	defer g.running.Add(-1)
	for {
		m := g.most.Load()
		if n <= m || g.most.CompareAndSwap(m, n) {
			break
		}
	}
	if g.first.CompareAndSwap(false, true) {
		<-g.gate
	}
	return g.Images.TransformRecipe(ctx, src, out, specs)
}

// Two large photos with a budget that fits one: the second waits for memory while the first is
// transformed, and starts when the first's transform gives its memory back; both succeed.
func TestMemoryBudgetKeepsTwoLargeDecodesApart(t *testing.T) {
	real, err := transcoder.NewImages(transcoder.DefaultImageConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	photo := testenv.MakeJPEG(t, dir, 6000, 4000)
	need := real.EstimateMemory(photo, nil)
	budget, err := membudget.New(max(need*3/2, membudget.MinSize))
	if err != nil {
		t.Fatal(err)
	}
	defer budget.Close()
	if 2*need <= budget.Size() || need > budget.Size() {
		t.Fatalf("a 24 MP JPEG is estimated at %d MiB: the budget of %d MiB must fit one and not two", need>>20, budget.Size()>>20)
	}
	data, err := os.ReadFile(photo)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	f.cfg.MaxInputBytes = 64 << 20
	images := &gatedImages{Images: real, gate: make(chan struct{})}
	p, err := New(f.cfg, Deps{Store: f.store, Scanner: cleanScanner{}, Images: images, Videos: fakeVideos{}, Memory: budget})
	if err != nil {
		t.Fatal(err)
	}
	outs := make(chan Outcome, 2)
	run := func(i int) {
		req := f.req
		req.S3Key = fmt.Sprintf("u/photo-%d.jpg", i)
		req.MediaID = fmt.Sprintf("550e8400-e29b-41d4-a716-44665544000%d", i)
		f.store.mu.Lock()
		f.store.objs["media/"+req.S3Key] = data
		f.store.mu.Unlock()
		go func() { outs <- p.Process(context.Background(), req, Image) }()
	}
	run(1)
	testenv.Eventually(t, time.Minute, func() error {
		if s := budget.Stats(); s.InUse != need || images.running.Load() != 1 {
			return fmt.Errorf("the first job is not in its transform yet (%d bytes admitted, %d decoding)", s.InUse, images.running.Load())
		}
		return nil
	})
	run(2)
	testenv.Eventually(t, time.Minute, func() error {
		if s := budget.Stats(); s.Waiting != 1 {
			return fmt.Errorf("the second job is not waiting for memory (%d waiting)", s.Waiting)
		}
		return nil
	})
	if n := images.running.Load(); n != 1 {
		t.Fatalf("%d decodes at once while the second job waits for memory", n)
	}
	close(images.gate)
	for range 2 {
		select {
		case out := <-outs:
			if out.Kind != Success {
				t.Errorf("a job ended %v: %v", out.Kind, out.Err)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("the jobs did not finish within 2 minutes")
		}
	}
	s := budget.Stats()
	if images.most.Load() != 1 || s.Peak != need || s.Waited != 1 || s.Admitted != 2 || s.InUse != 0 {
		t.Errorf("decodes at once %d, budget %+v: want 1 at a time, a peak of one job's %d bytes, the second admitted after waiting, all given back",
			images.most.Load(), s, need)
	}
}

// cleanScanner reads every byte and finds nothing; safe for jobs at once.
type cleanScanner struct{}

func (cleanScanner) Scan(ctx context.Context, r io.Reader, size int64) (scanner.Verdict, error) {
	if _, err := io.Copy(io.Discard, r); err != nil {
		return scanner.Verdict{}, err
	}
	return scanner.Verdict{}, nil
}

// Each lane takes from its own budget when the app gives the video lane one (issue 31: one budget for
// both held every image behind a 1080p encode); without one, videos share the image lane's.
func TestMemoryBudgetPerLane(t *testing.T) {
	images, err := membudget.New(membudget.MinSize)
	if err != nil {
		t.Fatal(err)
	}
	videos, err := membudget.New(membudget.MinSize)
	if err != nil {
		t.Fatal(err)
	}
	p := &Pipeline{memory: images, lanes: map[MediaKind]MemoryBudget{Video: videos}, kinds: kindHandlers(Deps{})}
	if p.budgetFor(Image) != images || p.budgetFor(Video) != videos {
		t.Errorf("with a budget per lane, images and videos must each take from their own")
	}
	shared := &Pipeline{memory: images, kinds: kindHandlers(Deps{})}
	if shared.budgetFor(Video) != images || shared.budgetFor(Image) != images {
		t.Errorf("without a video budget, videos must take from the one budget")
	}
}
