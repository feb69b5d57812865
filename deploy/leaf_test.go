package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestLeafNodeSourcesResponsesToHub runs the edge example of nats/leaf/ as written — the site's and the
// hub's server configs, the hub's stream definition — with only ports and store directories moved to
// the test's own, and checks what the README promises: the worker's streams live at the site (domain
// "edge"), responses published there reach the hub's stream, and those published while the link is down
// arrive after it comes back.
func TestLeafNodeSourcesResponsesToHub(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Ports chosen up front: the site's remote names the hub's leaf port, and a config reload of the site
	// must not change its client port.
	leafPort, sitePort := testenv.FreePort(t), testenv.FreePort(t)
	siteStore := t.TempDir()
	hub := startServer(t, hubOptions(t, leafPort, t.TempDir()))
	site := startServer(t, siteOptions(t, leafPort, siteStore, sitePort))
	testenv.Eventually(t, 20*time.Second, func() error { return leafConnected(hub, site) })

	// The worker at the site: its streams, provisioned as `mediaworker run` does, in the site's domain.
	siteNC := connectAs(t, site, "worker", "change-me-worker")
	siteJS, err := jetstream.New(siteNC)
	if err != nil {
		t.Fatal(err)
	}
	cfg := natsjs.DefaultConfig()
	if err := natsjs.Provision(ctx, siteJS, cfg); err != nil {
		t.Fatalf("provisioning the worker's streams at the site: %v", err)
	}
	if info, err := siteJS.AccountInfo(ctx); err != nil || info.Domain != "edge" {
		t.Fatalf("site JetStream domain = %q (%v), want edge", info.Domain, err)
	}

	// The hub: its stream sourcing the site's responses, from the JSON an operator would apply.
	hubNC := connectAs(t, hub, "api", "change-me-api")
	hubJS, err := jetstream.New(hubNC)
	if err != nil {
		t.Fatal(err)
	}
	sc := hubStreamConfig(t)
	if len(sc.Subjects) != 0 {
		t.Errorf("the hub stream listens on %v; it must only source, or responses are stored twice", sc.Subjects)
	}
	if _, err := hubJS.CreateStream(ctx, sc); err != nil {
		t.Fatalf("creating %s at the hub: %v", sc.Name, err)
	}
	// From the hub, the site's JetStream answers under its domain.
	edgeJS, err := jetstream.NewWithDomain(hubNC, "edge")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := edgeJS.Stream(ctx, cfg.ResponsesStream()); err != nil {
		t.Fatalf("the site's %s is not reachable from the hub as domain edge: %v", cfg.ResponsesStream(), err)
	}

	subj := cfg.Subjects()
	publishResponse(ctx, t, siteJS, subj.Response, "11111111-1111-4111-8111-111111111111")
	waitForMessages(ctx, t, hubJS, sc.Name, 1)

	// A request published at the hub lands in the site's work queue (the README's second option); it
	// must not show up in the hub's responses stream.
	ack, err := hubJS.Publish(ctx, subj.Request, []byte(`{}`))
	if err != nil {
		t.Fatalf("publishing a request from the hub: %v", err)
	}
	if ack.Stream != cfg.RequestsStream() || ack.Domain != "edge" {
		t.Errorf("a request from the hub was stored by %s in domain %q, want %s in edge", ack.Stream, ack.Domain, cfg.RequestsStream())
	}

	// The link goes down (the site's remote is switched off by a config reload, as an operator or a
	// network outage would); the site keeps working; the hub catches up when the link is back.
	setRemote(t, site, leafPort, siteStore, sitePort, false)
	testenv.Eventually(t, 20*time.Second, func() error {
		if hub.NumLeafNodes() != 0 {
			return errors.New("the leaf link is still up")
		}
		return nil
	})
	publishResponse(ctx, t, siteJS, subj.Virus, "22222222-2222-4222-8222-222222222222")
	if got := streamMsgs(ctx, t, hubJS, sc.Name); got != 1 {
		t.Fatalf("the hub's stream holds %d messages while the link is down, want 1", got)
	}
	t0 := time.Now()
	setRemote(t, site, leafPort, siteStore, sitePort, true)
	msgs := waitForMessages(ctx, t, hubJS, sc.Name, 2)
	t.Logf("the hub caught up %s after the link came back", time.Since(t0).Round(time.Second))
	for i, want := range []string{subj.Response, subj.Virus} {
		if msgs[i].Subject != want {
			t.Errorf("sourced message %d has subject %q, want %q (subjects are kept)", i+1, msgs[i].Subject, want)
		}
		if msgs[i].Header.Get(jetstream.MsgIDHeader) == "" {
			t.Errorf("sourced message %d lost its Nats-Msg-Id header", i+1)
		}
	}
}

// hubOptions loads leaf/hub.conf and moves its ports and store into the test's.
func hubOptions(t *testing.T, leafPort int, store string) *server.Options {
	t.Helper()
	o, err := server.ProcessConfigFile("nats/leaf/hub.conf")
	if err != nil {
		t.Fatalf("nats/leaf/hub.conf: %v", err)
	}
	if !o.JetStream || o.JetStreamDomain != "hub" || o.LeafNode.Port == 0 {
		t.Fatalf("hub.conf: want JetStream in domain hub accepting leaf connections, got domain %q leaf port %d", o.JetStreamDomain, o.LeafNode.Port)
	}
	o.LeafNode.Host, o.LeafNode.Port = "127.0.0.1", leafPort
	return relocate(o, store)
}

// siteOptions loads leaf/site.conf and points its leaf remote at the test's hub.
func siteOptions(t *testing.T, leafPort int, store string, port int) *server.Options {
	t.Helper()
	o, err := server.ProcessConfigFile("nats/leaf/site.conf")
	if err != nil {
		t.Fatalf("nats/leaf/site.conf: %v", err)
	}
	if !o.JetStream || o.JetStreamDomain != "edge" || !o.SyncAlways || len(o.LeafNode.Remotes) != 1 {
		t.Fatalf("site.conf: want JetStream in domain edge with sync always and one leaf remote")
	}
	r := o.LeafNode.Remotes[0]
	if r.LocalAccount != "APP" || len(r.URLs) != 1 {
		t.Fatalf("site.conf: the leaf remote must bind account APP with one URL")
	}
	u := *r.URLs[0] // keep the credentials, change only the address
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(leafPort))
	r.URLs = []*url.URL{&u}
	o.LeafNode.ReconnectInterval = 250 * time.Millisecond // the default (1 s) works too; this is quicker
	o = relocate(o, store)
	o.Port = port
	return o
}

// setRemote switches the site's leaf remote off or on with a config reload.
func setRemote(t *testing.T, site *server.Server, leafPort int, store string, port int, on bool) {
	t.Helper()
	o := siteOptions(t, leafPort, store, port)
	o.LeafNode.Remotes[0].Disabled = !on
	if err := site.ReloadOptions(o); err != nil {
		t.Fatalf("reloading the site's config with the remote %s: %v", map[bool]string{true: "on", false: "off"}[on], err)
	}
}

func relocate(o *server.Options, store string) *server.Options {
	o.Host, o.Port = "127.0.0.1", -1
	o.HTTPHost, o.HTTPPort = "", 0
	o.StoreDir = store
	o.NoLog, o.NoSigs = true, true
	return o
}

func startServer(t *testing.T, o *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("creating %s: %v", o.ServerName, err)
	}
	s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		t.Fatalf("%s did not start", o.ServerName)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

func leafConnected(hub, site *server.Server) error {
	if hub.NumLeafNodes() != 1 || site.NumLeafNodes() != 1 {
		return errors.New("the site is not connected to the hub as a leaf node")
	}
	return nil
}

func connectAs(t *testing.T, s *server.Server, user, pass string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(user, pass))
	if err != nil {
		t.Fatalf("connecting to %s as %s: %v", s.Name(), user, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// hubStreamConfig decodes leaf/hub-responses-stream.json strictly into the server's own stream type (so
// every field is one nats-server knows) and into the client's (to create it).
func hubStreamConfig(t *testing.T) jetstream.StreamConfig {
	t.Helper()
	raw, err := os.ReadFile("nats/leaf/hub-responses-stream.json")
	if err != nil {
		t.Fatal(err)
	}
	var strict server.StreamConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&strict); err != nil {
		t.Fatalf("hub-responses-stream.json is not a nats-server stream config: %v", err)
	}
	if len(strict.Sources) != 1 || strict.Sources[0].External == nil || strict.Sources[0].External.ApiPrefix != "$JS.edge.API" {
		t.Fatalf("hub-responses-stream.json must source one stream through $JS.edge.API, got %+v", strict.Sources)
	}
	var sc jetstream.StreamConfig
	if err := json.Unmarshal(raw, &sc); err != nil {
		t.Fatal(err)
	}
	return sc
}

// publishResponse publishes a schema-valid response the way the worker does (with a Nats-Msg-Id).
func publishResponse(ctx context.Context, t *testing.T, js jetstream.JetStream, subject, mediaID string) {
	t.Helper()
	var body any = contracts.Response{MediaID: mediaID, OriginalURL: "https://api.example/m/" + mediaID, Error: "virus detected: Test"}
	schema := contracts.SchemaResponse
	if subject == contracts.SubjectsFor("app").Virus {
		body = contracts.VirusEvent{MediaID: mediaID, S3Key: "u/x.jpg", S3Bucket: "media", MediaURL: "https://api.example/m/" + mediaID,
			VirusName: "Test", DetectedAt: time.Now().UTC().Format(time.RFC3339), ActionTaken: contracts.ActionDeleted}
		schema = contracts.SchemaVirusEvent
	}
	if err := contracts.Validate(schema, body); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(body)
	if _, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(mediaID+"/1/test")); err != nil {
		t.Fatalf("publishing to %s at the site: %v", subject, err)
	}
}

func streamMsgs(ctx context.Context, t *testing.T, js jetstream.JetStream, stream string) int {
	t.Helper()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return int(info.State.Msgs)
}

// waitForMessages polls the hub's stream until it holds n messages and returns them in order.
func waitForMessages(ctx context.Context, t *testing.T, js jetstream.JetStream, stream string, n int) []*jetstream.RawStreamMsg {
	t.Helper()
	var s jetstream.Stream
	testenv.Eventually(t, 60*time.Second, func() error {
		var err error
		if s, err = js.Stream(ctx, stream); err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if got := int(info.State.Msgs); got != n {
			return fmt.Errorf("the hub's stream holds %d messages, want %d", got, n)
		}
		return nil
	})
	var out []*jetstream.RawStreamMsg
	for seq := uint64(1); seq <= uint64(n); seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("reading message %d of the hub's stream: %v", seq, err)
		}
		out = append(out, m)
	}
	return out
}
