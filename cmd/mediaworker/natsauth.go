package main

import (
	natsjs "github.com/mediaworker/mediaworker/jetstream"
)

// bindNATSAuth registers the NATS credential and TLS flags, read like the nats CLI reads them: each
// flag from MW_<FLAG> and then the nats CLI's variable. Secrets come from the environment or files
// (--nats-creds, --nats-nkey), never from the image.
func bindNATSAuth(c *command, a *natsjs.ClientAuth) {
	fs := c.fs
	for _, f := range []struct {
		p         *string
		name, env string
		usage     string
	}{
		{&a.Creds, "nats-creds", "NATS_CREDS", "NATS credentials file (user JWT and nkey seed, decentralised auth)"},
		{&a.NKey, "nats-nkey", "NATS_NKEY", "file holding a NATS user nkey seed"},
		{&a.User, "nats-user", "NATS_USER", "NATS user name (with --nats-password)"},
		{&a.Password, "nats-password", "NATS_PASSWORD", "NATS password"},
		{&a.Token, "nats-token", "NATS_TOKEN", "NATS authentication token"},
		{&a.CA, "nats-tls-ca", "NATS_CA", "CA certificates (PEM) that sign the NATS server's certificate"},
		{&a.Cert, "nats-tls-cert", "NATS_CERT", "client certificate (PEM) for NATS servers that require mutual TLS"},
		{&a.Key, "nats-tls-key", "NATS_KEY", "key of --nats-tls-cert"},
	} {
		fs.StringVar(f.p, f.name, *f.p, f.usage)
		c.fallbacks[f.name] = []string{f.env}
	}
}
