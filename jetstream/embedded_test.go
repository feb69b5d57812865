package jetstream_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsjs "github.com/mediaworker/mediaworker/jetstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"
)

func embeddedCfg(t *testing.T, listen string) natsjs.EmbeddedConfig {
	return natsjs.EmbeddedConfig{Listen: listen, DataDir: t.TempDir()}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Beyond loopback the embedded server needs a credential; the rule is checked before anything binds.
func TestEmbeddedRefusesAnonymousBeyondLoopback(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:4222", ":4222", "[::]:4222", "192.0.2.1:4222"} {
		err := embeddedCfg(t, listen).Validate()
		if err == nil || !strings.Contains(err.Error(), "anonymous clients") || !strings.Contains(err.Error(), "credential (ClientAuth.Token") {
			t.Errorf("%s without credentials: %v, want a refusal naming ClientAuth.Token", listen, err)
		}
	}
	// A config file that lets anonymous clients in as a user is no better.
	cfg := embeddedCfg(t, "0.0.0.0:4222")
	cfg.ServerConfig = writeFile(t, "nats.conf", `accounts: { A: { jetstream: enabled, users: [{user: a, password: b}] } }
no_auth_user: a
`)
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "no_auth_user") {
		t.Errorf("no_auth_user: %v, want a refusal", err)
	}
	for _, c := range []natsjs.EmbeddedConfig{
		embeddedCfg(t, "127.0.0.1:4222"), embeddedCfg(t, "localhost:4222"), embeddedCfg(t, "[::1]:4222"),
		func() natsjs.EmbeddedConfig { c := embeddedCfg(t, "0.0.0.0:4222"); c.Auth.Token = "t"; return c }(),
		func() natsjs.EmbeddedConfig {
			c := embeddedCfg(t, "0.0.0.0:4222")
			c.Auth.User, c.Auth.Password = "u", "p"
			return c
		}(),
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s with %q: %v", c.Listen, c.Auth.Method(), err)
		}
	}
	bad := embeddedCfg(t, "0.0.0.0:4222")
	bad.Auth.Creds = writeFile(t, "x.creds", "x")
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "EmbeddedConfig.ServerConfig") {
		t.Errorf("creds without an operator: %v", err)
	}
	bad = embeddedCfg(t, "0.0.0.0:4222")
	bad.Auth.User = "u"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "a user (ClientAuth.User) needs a password (ClientAuth.Password)") {
		t.Errorf("user without password: %v", err)
	}
}

func startEmbedded(t *testing.T, cfg natsjs.EmbeddedConfig) string {
	t.Helper()
	s, err := natsjs.StartEmbedded(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s.ClientURL()
}

func connects(url string, opts ...nats.Option) error {
	nc, err := nats.Connect(url, append(opts, nats.Timeout(5*time.Second))...)
	if err != nil {
		return err
	}
	defer nc.Close()
	return nc.Flush()
}

// Each credential kind: the server accepts it and refuses anonymous clients and wrong secrets.
func TestEmbeddedAuthenticates(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	cases := []struct {
		name  string
		auth  natsjs.ClientAuth
		wrong natsjs.ClientAuth
	}{
		{"token", natsjs.ClientAuth{Token: "s3cret-token"}, natsjs.ClientAuth{Token: "guess"}},
		{"user", natsjs.ClientAuth{User: "worker", Password: "pw"}, natsjs.ClientAuth{User: "worker", Password: "nope"}},
		{"nkey", natsjs.ClientAuth{NKey: writeFile(t, "u.nk", string(seed))}, natsjs.ClientAuth{NKey: writeFile(t, "o.nk", string(otherSeed))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := embeddedCfg(t, "127.0.0.1:-1")
			cfg.Auth = c.auth
			url := startEmbedded(t, cfg)
			if err := connects(url); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
				t.Errorf("anonymous client: %v, want an authorization violation", err)
			}
			wrong, _ := c.wrong.Options()
			if err := connects(url, wrong...); err == nil {
				t.Error("a wrong credential was accepted")
			}
			right, err := c.auth.Options()
			if err != nil {
				t.Fatal(err)
			}
			if err := connects(url, right...); err != nil {
				t.Errorf("the right credential was refused: %v", err)
			}
		})
	}
}

// With a certificate the server requires TLS; a client that trusts the CA gets in.
func TestEmbeddedTLS(t *testing.T) {
	certFile, keyFile := selfSigned(t)
	cfg := embeddedCfg(t, "127.0.0.1:-1")
	cfg.Auth.Token = "tok"
	cfg.TLSCert, cfg.TLSKey = certFile, keyFile
	url := startEmbedded(t, cfg)
	if err := connects(url, nats.Token("tok")); err == nil {
		t.Error("a plain-text client was accepted")
	}
	client := natsjs.ClientAuth{Token: "tok", CA: certFile}
	opts, err := client.Options()
	if err != nil {
		t.Fatal(err)
	}
	if err := connects(strings.Replace(url, "nats://", "tls://", 1), opts...); err != nil {
		t.Errorf("TLS client with the CA: %v", err)
	}
}

func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mediaworker test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalPKCS8PrivateKey(key)
	return writeFile(t, "cert.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))),
		writeFile(t, "key.pem", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})))
}

// --nats-listen 127.0.0.1:0 means any free port, as for any Go listener: two servers started that way
// at once both run (nats-server alone would put both on its default 4222, and the second would not start).
func TestEmbeddedListenPortZeroPicksAFreePort(t *testing.T) {
	a := startEmbedded(t, embeddedCfg(t, "127.0.0.1:0"))
	b := startEmbedded(t, embeddedCfg(t, "127.0.0.1:0"))
	if a == b {
		t.Fatalf("both servers report %s", a)
	}
	for _, url := range []string{a, b} {
		if err := connects(url); err != nil {
			t.Errorf("connecting to %s: %v", url, err)
		}
	}
}
