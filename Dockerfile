# Builds with docker (legacy builder or BuildKit) and with podman/buildah; with podman pass
# `--format docker`, or the OCI image it makes by default drops the HEALTHCHECK below. No `# syntax=`
# line: BuildKit would fetch that frontend image from Docker Hub, failing mirror-only and air-gapped builds.
# Stage 1 (build): compile mediaworker with cgo against libvips.
FROM golang:1.26-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends libvips-dev pkg-config && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/mediaworker ./cmd/mediaworker

# Stage 2 (runtime): only the runtime libraries, ffmpeg, and a non-root user.
FROM debian:bookworm-slim
# Debian's ffmpeg links libGL, libvulkan and SDL (for ffplay, in the same package), so apt brings Mesa's
# GPU drivers and the LLVM they are compiled with (about 170 MB). Those drivers are only loaded when a
# program opens a GPU context, which the worker's software encodes never do; dpkg is told not to unpack
# them (nor documentation), and the ffmpeg run below proves the encoders still load.
RUN printf '%s\n' \
      'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright' \
      'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*' 'path-exclude=/usr/share/lintian/*' \
      'path-exclude=/usr/lib/*/dri/*' 'path-exclude=/usr/lib/*/libLLVM*' 'path-exclude=/usr/lib/*/libz3.so*' \
      'path-exclude=/usr/lib/*/libvulkan_*' 'path-exclude=/usr/share/vulkan/icd.d/*' \
      > /etc/dpkg/dpkg.cfg.d/mediaworker-slim \
    && apt-get update && apt-get install -y --no-install-recommends libvips42 ffmpeg ca-certificates \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt/* /var/log/dpkg.log \
    && groupadd --system --gid 10001 mediaworker \
    && useradd --system --uid 10001 --gid 10001 --home /var/lib/mediaworker --create-home mediaworker
COPY --from=build /out/mediaworker /usr/local/bin/mediaworker
# The worker loads libvips at its first image, not at start: make a missing library fail the build; and
# the encoders a video job uses, after the exclusions above.
RUN ["mediaworker", "version"]
RUN ["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=64x64:d=0.2", "-f", "lavfi", "-i", "sine=d=0.2", \
     "-c:v", "libx264", "-c:a", "aac", "-f", "null", "-"]
# uid and gid 10001, as deploy/k8s/deployment.yaml's runAsUser, runAsGroup and fsGroup say.
USER 10001:10001
WORKDIR /var/lib/mediaworker
ENV MW_DATA_DIR=/var/lib/mediaworker/data MW_TMP_DIR=/var/lib/mediaworker/tmp \
    MW_NATS_LISTEN=0.0.0.0:4222 MW_HTTP_ADDR=0.0.0.0:8080 \
    MW_SCAN_API=false
# No secret is baked in. The embedded NATS server listens on all interfaces here, so the worker refuses to
# start until it is given a credential at run time, from the environment or a mounted file:
#   docker run -e NATS_TOKEN="$(openssl rand -hex 32)" ...                 (or NATS_USER + NATS_PASSWORD)
#   docker run -v ./nats:/run/nats:ro -e MW_NATS_SERVER_CONFIG=/run/nats/accounts.conf \
#              -e MW_NATS_USER=worker -e NATS_WORKER_PASSWORD=... -e MW_NATS_PASSWORD=... ...
#                                          (least-privilege users, deploy/nats/accounts.conf)
# With an external NATS (MW_NATS_URL) pass that server's credential the same way (NATS_CREDS for a file).
# /v1/scan is off in the image: HTTP listens on all interfaces here. Turn it on with MW_SCAN_API=true and
# a MW_SCAN_API_TOKEN (the worker refuses to open it to the network without one).
EXPOSE 4222 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s CMD ["mediaworker", "healthcheck", "--http-addr", "127.0.0.1:8080"]
ENTRYPOINT ["mediaworker"]
CMD ["run"]
