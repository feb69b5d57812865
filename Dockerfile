# syntax=docker/dockerfile:1
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
RUN apt-get update && apt-get install -y --no-install-recommends libvips42 ffmpeg ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home /var/lib/mediaworker --create-home mediaworker
COPY --from=build /out/mediaworker /usr/local/bin/mediaworker
# The worker loads libvips at its first image, not at start: make a missing library fail the build.
RUN ["mediaworker", "version"]
USER mediaworker
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
