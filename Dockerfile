# The nodetopo agent image (deploy/daemonset.yaml runs `nodetopo agent --host-root=/host`).
#
#   docker build -t nodetopo:0.1.0 .
#
# One recipe, two builders: this Dockerfile for users with a registry, and image/build_oci.py for
# machines without one (Debian rootfs by mmdebstrap, then `ctr images import`). Both install
#   - the Debian bookworm packages listed in image/debian-packages.txt (python3, ibstat, lspci ...),
#   - the Python packages of image/requirements.lock, wheels only, by hash (pip --require-hashes; the
#     lock lists the x86_64 and the aarch64 wheel of each compiled package, and pip, run on the target
#     architecture, keeps the one whose hash is listed),
#   - nodetopo/ itself and image/nodetopo (the entry point) in a last, small layer,
# and take the image's labels, user, entry point and command from the final stage below
# (build_oci.py reads them from this file; tests/node checks both images agree).
# nvidia-smi and libnvidia-ml are NOT in the image: the NVIDIA container runtime injects the host
# driver's copies when the pod sets NVIDIA_VISIBLE_DEVICES=all and NVIDIA_DRIVER_CAPABILITIES=utility
# (the DaemonSet does), so they always match the node's kernel module. See docs/deploy.md.
# No compiler, no pip in the final image. Its default user is uid 65532 and it needs no writable root
# filesystem; the DaemonSet runs the agent as uid 0 (every capability dropped) for one reason, the
# kubelet's root-only PodResources socket (docs/deploy.md "Pod Security level").
ARG BASE=debian:bookworm-slim@sha256:3783cc01769c7b2b1b83a5c5ad96c815348e28ed7da68e2e3687004faa906251

FROM ${BASE} AS wheels
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3-pip \
 && rm -rf /var/lib/apt/lists/*
COPY image/requirements.lock /tmp/requirements.lock
RUN python3 -m pip install --no-cache-dir --no-deps --require-hashes --only-binary=:all: \
      --target=/out/usr/local/lib/python3.11/dist-packages -r /tmp/requirements.lock

FROM ${BASE}
COPY image/debian-packages.txt /tmp/debian-packages.txt
RUN apt-get update \
 && sed 's/#.*//' /tmp/debian-packages.txt | xargs apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/debian-packages.txt
COPY --from=wheels /out/ /
COPY nodetopo /usr/local/lib/python3.11/dist-packages/nodetopo
COPY image/nodetopo /usr/local/bin/nodetopo
# Bytecode checked by source hash (not file times): the root filesystem is read-only and
# PYTHONDONTWRITEBYTECODE is set, so without it every start would compile nodetopo from source.
RUN python3 -m compileall -q --invalidation-mode checked-hash /usr/local/lib/python3.11/dist-packages/nodetopo

LABEL org.opencontainers.image.title="nodetopo" \
      org.opencontainers.image.description="GPU node topology agent: NodeTopology resource and nodetopo.io/ node labels" \
      org.opencontainers.image.source="https://github.com/nodetopo/nodetopo" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["nodetopo"]
CMD ["agent", "--host-root=/host"]
