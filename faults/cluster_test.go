package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
)

// A 3-node JetStream cluster with R3 streams (and an R3 object store); the node leading the requests
// stream is shut down mid-run. The worker, given every node's URL, carries on and every request is
// answered exactly once.
func TestClusterNodeLossWorkerContinues(t *testing.T) {
	cl := testenv.StartCluster(t, 3)
	clamd := testenv.StartClamd(t)
	startWorker(t, "a", workerOpts{natsURL: cl.URLs(), clamd: clamd, args: []string{"--replicas", "3"}})
	l := newLedger(t, cl.URLs())
	c := newClient(t, l, nil, 3)

	ids := submitImages(t, c, 30, 1024, 768)
	// Everything the worker depends on must survive the loss of a node: the streams and the object
	// store's bucket (whoever created it first, the API or the worker).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{streams.RequestsStream(), streams.ResponsesStream(), streams.DLQStream(), "OBJ_" + bucket} {
		s, err := l.js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Replicas != 3 {
			t.Errorf("stream %s has %d replicas, want 3 (--replicas 3)", name, info.Config.Replicas)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	s, err := l.js.Stream(ctx, streams.RequestsStream())
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := l.sync(); err != nil {
			return err
		}
		if n := l.total(); n < 5 {
			return fmt.Errorf("%d responses so far", n)
		}
		return nil
	})
	// Shut down the node leading the requests stream: a new leader must be elected and the worker must
	// find it.
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := cl.Index(info.Cluster.Leader)
	if victim < 0 {
		t.Fatalf("requests stream leader %q is not one of the nodes", info.Cluster.Leader)
	}
	before := l.total()
	cl.Shutdown(victim)
	t.Logf("shut down %s (requests stream leader) after %d of %d responses", info.Cluster.Leader, before, len(ids))
	if before == len(ids) {
		t.Fatal("every request was answered before the node went down; the test proves nothing")
	}

	l.await(ids, 90*time.Second)
	expectSuccess(t, l, ids)
	l.awaitEmptyQueue(30 * time.Second)
	dupes := l.republished(ids)
	t.Logf("%d requests answered once each in the stream after losing a node; %d deliveries; %d republished on the wire",
		len(ids), l.deliveries(), dupes)
}
