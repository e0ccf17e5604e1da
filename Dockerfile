# The gateway image: the sidecar (`gateway`), the admin CLI (`gatewayctl`) and
# the fake vendors (`fakevendor`) as static binaries on a distroless base with
# no shell. Envoy runs from its official image beside it (docker-compose.yml,
# deploy/k8s/).
#
#   docker build -t modelgateway/gateway .
#
# deploy/dockerfile_test.go checks this file's stages.

# The Go toolchain must be at least the go line of go.mod (the official
# golang images set GOTOOLCHAIN=local, so an older one fails the build).
FROM --platform=$BUILDPLATFORM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
ENV CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    VERSION=$(sed -En 's/^## ([0-9]+\.[0-9]+\.[0-9]+) .*/\1/p' CHANGELOG.md | head -n1) && \
    go build -trimpath -ldflags "-s -w -X github.com/modelgateway/gateway/internal/version.Release=$VERSION" \
      -o /out/bin/ ./cmd/gateway ./cmd/gatewayctl ./cmd/fakevendor
# The working directory of the sidecar: store.spool_dir (.run/spool) is
# relative to it. Mount a volume here when the root filesystem is read-only.
RUN mkdir -p /out/state/.run/spool

# The price catalogue, as `make catalogue` makes it: LiteLLM's
# model_prices_and_context_window.json from the litellm wheel whose version
# the Makefile pins (LITELLM_VERSION), never a copy kept in this repository.
FROM --platform=$BUILDPLATFORM python:3.12-slim-bookworm AS catalogue
WORKDIR /src
COPY Makefile ./
RUN version="$(sed -n 's/^LITELLM_VERSION *:= *//p' Makefile)" && test -n "$version" && \
    pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: "litellm==$version" -d /tmp/wheel && \
    python -c 'import glob, zipfile; w = glob.glob("/tmp/wheel/litellm-*.whl")[0]; \
open("/catalogue.json", "wb").write(zipfile.ZipFile(w).read("litellm/model_prices_and_context_window_backup.json"))'

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bin/ /usr/local/bin/
# Outside /etc/gateway, which deployments replace with their own gateway.yaml.
COPY --from=catalogue /catalogue.json /usr/share/gateway/model_prices_and_context_window.json
ENV GATEWAY_CATALOGUE=/usr/share/gateway/model_prices_and_context_window.json
COPY gateway.yaml /etc/gateway/gateway.yaml
COPY --from=build --chown=65532:65532 /out/state /var/lib/gateway
WORKDIR /var/lib/gateway
# Numeric (the image's "nonroot" user), so that Kubernetes' runAsNonRoot can
# verify it.
USER 65532:65532
# 50051: ext_proc and grpc.health.v1; 8081: /health, /v1/usage, /metrics.
# The admin gRPC API stays on loopback (use `gatewayctl` inside the container).
EXPOSE 50051 8081
ENTRYPOINT ["gateway"]
CMD ["serve", "--config", "/etc/gateway/gateway.yaml"]
