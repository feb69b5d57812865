package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is a JetStream cluster of in-process servers joined by routes on loopback, so R3 streams can
// be tested in one test process.
type Cluster struct {
	t       testing.TB
	mu      sync.Mutex
	servers []*server.Server // nil once shut down
	urls    []string
}

// StartCluster starts n clustered JetStream servers on loopback, waits until they have elected a meta
// leader that sees every peer, and shuts them down when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("a cluster needs at least one server, got %d", n)
	}
	routePorts := make([]int, n)
	for i := range routePorts {
		routePorts[i] = FreePort(t)
	}
	c := &Cluster{t: t}
	t.Cleanup(func() {
		for i := range c.servers {
			c.Shutdown(i)
		}
	})
	for i := 0; i < n; i++ {
		var routes []*url.URL
		for j, p := range routePorts {
			if j != i {
				routes = append(routes, &url.URL{Scheme: "nats-route", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(p))})
			}
		}
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			// A claimed port, not a random one: a shut-down node's clients keep redialling its
			// address, and a random port could by then be another test's listener.
			Port:      FreePort(t),
			JetStream: true,
			StoreDir:  t.TempDir(),
			NoLog:     true,
			NoSigs:    true,
			Cluster: server.ClusterOpts{
				Name: "mw-faults",
				Host: "127.0.0.1",
				Port: routePorts[i],
			},
			Routes: routes,
		}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("creating nats server %d: %v", i+1, err)
		}
		s.Start()
		c.mu.Lock()
		c.servers = append(c.servers, s)
		c.mu.Unlock()
	}
	for i, s := range c.servers {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("nats server %d did not become ready", i+1)
		}
		c.urls = append(c.urls, s.ClientURL())
	}
	started := time.Now()
	Eventually(t, 60*time.Second, func() error {
		var leader *server.Server
		for _, s := range c.servers {
			if s.JetStreamIsLeader() {
				leader = s
			}
		}
		if leader == nil {
			return errors.New("no JetStream meta leader yet")
		}
		if peers := leader.JetStreamClusterPeers(); len(peers) != n {
			return fmt.Errorf("meta leader sees %d of %d peers", len(peers), n)
		}
		return JetStreamReady(c.URLs())
	})
	t.Logf("%d-node JetStream cluster ready in %s: %s", n, time.Since(started).Round(time.Millisecond), c.URLs())
	return c
}

// URLs is the comma-separated list of every server's client URL, the form nats.Connect accepts.
func (c *Cluster) URLs() string { return strings.Join(c.urls, ",") }

// Index returns the position of the server called name, or -1.
func (c *Cluster) Index(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.servers {
		if s != nil && s.Name() == name {
			return i
		}
	}
	return -1
}

// Shutdown stops the i-th server (its clients are disconnected at once) and waits until it is down.
// It is idempotent.
func (c *Cluster) Shutdown(i int) {
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s == nil {
		return
	}
	s.Shutdown()
	s.WaitForShutdown()
}

// JetStreamReady is nil once the NATS at urls (comma-separated) answers a JetStream account info request.
func JetStreamReady(urls string) error {
	nc, err := nats.Connect(urls, nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("jetstream account info: %w", err)
	}
	return nil
}
