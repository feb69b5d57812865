// Test helper for package facts: runs Evan Wallace's reference ThumbHash (the npm package "thumbhash",
// pinned in package-lock.json) on what the Go test sends, so the Go port is judged by the reference and
// not by itself. Reads a JSON array of requests on stdin and writes a JSON array of answers on stdout:
//   {"decode": "<base64 hash>"}            → {"avg": {r,g,b,a} (0..1), "ratio": w/h, "w", "h", "rgba": base64}
//   {"encode": {"w", "h", "rgba": base64}} → {"hash": "<base64 hash>"}
//   {"cos": [x, …]}                        → {"cos": [Math.cos(x), …]}  (this engine's cosines, for the port)
import { rgbaToThumbHash, thumbHashToRGBA, thumbHashToAverageRGBA, thumbHashToApproximateAspectRatio } from 'thumbhash'

let input = ''
for await (const chunk of process.stdin) input += chunk
const answers = JSON.parse(input).map((req) => {
  if (req.decode !== undefined) {
    const hash = Buffer.from(req.decode, 'base64')
    const img = thumbHashToRGBA(hash)
    return {
      avg: thumbHashToAverageRGBA(hash),
      ratio: thumbHashToApproximateAspectRatio(hash),
      w: img.w,
      h: img.h,
      rgba: Buffer.from(img.rgba).toString('base64'),
    }
  }
  if (req.encode !== undefined) {
    const { w, h, rgba } = req.encode
    return { hash: Buffer.from(rgbaToThumbHash(w, h, Buffer.from(rgba, 'base64'))).toString('base64') }
  }
  if (req.cos !== undefined) {
    // JSON numbers round-trip doubles exactly both ways, so these are the engine's bits.
    return { cos: req.cos.map(Math.cos) }
  }
  throw new Error('unknown request ' + JSON.stringify(req))
})
process.stdout.write(JSON.stringify(answers))
