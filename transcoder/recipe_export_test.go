package transcoder

// AVIFSpeed is the AV1 encoder speed variants are encoded at, for BenchmarkAVIFvsWebP.
const AVIFSpeed = avifSpeed
