// mwbench's sharp peer (peers.go): the job the worker's default recipe does, written as a Node service
// using sharp would write it. It reads jobs from stdin, one JSON object a line
// ({"id": 1, "src": "/path/photo.jpg", "out": "/dir"}), runs at most `inflight` at once (the worker's
// image slots), and answers each on stdout with {"id", "variants": [{name, width, height, size}]} or
// {"id", "error"}.
//
// A job: `clamdscan --fdpass` of the upload against the worker's clamd (a site scans before it decodes),
// then one decode shrunk to the largest variant's box (shrink-on-load, EXIF orientation applied, sRGB),
// held raw in memory, and the three WebP variants made from it at once (Promise.all: sharp's own
// thread pool encodes them in parallel, as a site's code would). Sizes, qualities and effort come from
// the worker's config (argv[2], JSON), so both make the same pictures.
'use strict';
const sharp = require('sharp');
const { execFile } = require('node:child_process');
const path = require('node:path');
const readline = require('node:readline');

const cfg = JSON.parse(process.argv[2]);
// cfg: {inflight, effort, scanConf ("" = no scan), variants: [{name, size, quality}], largest first}

function scan(src) {
  return new Promise((resolve, reject) => {
    execFile('clamdscan', ['--config-file=' + cfg.scanConf, '--fdpass', '--no-summary', src], (err, stdout, stderr) => {
      if (err) reject(new Error(`clamdscan ${src}: ${err.message}: ${stdout}${stderr}`));
      else resolve();
    });
  });
}

async function job(j) {
  if (cfg.scanConf) await scan(j.src);
  const top = cfg.variants[0].size;
  const { data, info } = await sharp(j.src, { failOn: 'error' })
    .rotate()
    .resize(top, top, { fit: 'inside', withoutEnlargement: true })
    .raw()
    .toBuffer({ resolveWithObject: true });
  const raw = { raw: { width: info.width, height: info.height, channels: info.channels } };
  return Promise.all(cfg.variants.map(async (v) => {
    let p = sharp(data, raw);
    if (v.size < top) p = p.resize(v.size, v.size, { fit: 'inside', withoutEnlargement: true });
    const o = await p.webp({ quality: v.quality, effort: cfg.effort }).toFile(path.join(j.out, v.name + '.webp'));
    return { name: v.name, width: o.width, height: o.height, size: o.size };
  }));
}

const queue = [];
let running = 0;
function pump() {
  while (running < cfg.inflight && queue.length > 0) {
    const j = queue.shift();
    running++;
    job(j).then(
      (variants) => process.stdout.write(JSON.stringify({ id: j.id, variants }) + '\n'),
      (err) => process.stdout.write(JSON.stringify({ id: j.id, error: String(err && err.message || err) }) + '\n'),
    ).finally(() => { running--; pump(); });
  }
}

process.stdout.write(JSON.stringify({ ready: true, versions: { sharp: sharp.versions.sharp, vips: sharp.versions.vips }, concurrency: sharp.concurrency() }) + '\n');
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  if (!line.trim()) return;
  queue.push(JSON.parse(line));
  pump();
});
