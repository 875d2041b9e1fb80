# syntax=docker/dockerfile:1.7
#
# The karpenter-rs controller image: one static binary (musl, rustls with ring, no OpenSSL) built with the `aws`
# feature, on a distroless base that has no shell. Multi-platform:
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg KARPENTER_GIT_COMMIT=$(git rev-parse HEAD) -t <registry>/karpenter-rs:<tag> .
#
# Each platform compiles natively inside its own platform's builder (QEMU under buildx when it differs from the
# host), which avoids cross linkers; the Alpine toolchain targets musl, so the result is statically linked.

ARG RUST_VERSION=1.95

FROM --platform=$TARGETPLATFORM rust:${RUST_VERSION}-alpine AS build
# make and gcc: jemalloc (the binary's allocator, feature `jemalloc`) is built from C sources.
RUN apk add --no-cache musl-dev gcc make
WORKDIR /src
# Manifests first, so the dependency layer is reused while only our sources change.
COPY Cargo.toml Cargo.lock ./
COPY .cargo ./.cargo
COPY crates ./crates
COPY bins ./bins
COPY benches ./benches
COPY perf ./perf
COPY examples ./examples
COPY charts ./charts
COPY docs ./docs
# The commit `version` and the karpenter_build_info metric report: the build context has no .git (.dockerignore),
# so it comes as a build argument: --build-arg KARPENTER_GIT_COMMIT=$(git rev-parse HEAD) ("unknown" without).
ARG KARPENTER_GIT_COMMIT=unknown
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    KARPENTER_GIT_COMMIT="${KARPENTER_GIT_COMMIT}" \
    cargo build --locked --release -p karpenter-controller --features aws \
 && install -D -m 0755 target/release/karpenter-controller /out/karpenter-controller

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/karpenter-controller /usr/local/bin/karpenter-controller
USER 65532:65532
# The chart passes ["run", "--provider=aws"]; settings come from the environment (docs/settings.md).
ENTRYPOINT ["/usr/local/bin/karpenter-controller"]
