// Package deploy holds the deployment files — compose.yaml, k8s/, nats/ (stream, consumer and leaf-node
// configs) and clamav/ — and no code of its own. Its tests parse those files and check the invariants that
// keep them working with the worker: grace periods longer than the drain timeout, probes on the right
// paths, only real MW_* setting names, clamd limits above the worker's input cap, and a leaf-node layout
// that really sources a site's responses to the hub.
package deploy
