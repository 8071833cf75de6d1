# The nodetopo agent image (deploy/daemonset.yaml runs `nodetopo agent --host-root=/host`).
#
# - Python slim base; nodetopo installed with pip from this checkout (no build tools left behind).
# - ibstat (infiniband-diags) and lspci (pciutils) from Debian. nvidia-smi and libnvidia-ml are NOT
#   in the image: the NVIDIA container runtime injects the host driver's copies when the pod sets
#   NVIDIA_VISIBLE_DEVICES=all and NVIDIA_DRIVER_CAPABILITIES=utility (the DaemonSet does), so they
#   always match the node's kernel module. See docs/deploy.md for runtimeClassName: nvidia.
# - Runs as uid 65532 (non-root) with a read-only root filesystem.
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends infiniband-diags pciutils \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md ./
COPY nodetopo ./nodetopo
RUN pip install --no-cache-dir . && rm -rf /src

WORKDIR /
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["nodetopo"]
CMD ["agent", "--host-root=/host"]
