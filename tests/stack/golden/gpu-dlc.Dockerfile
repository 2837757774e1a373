# GPU training image for EC2 with EFA: AWS Deep Learning Container base.
# Rendered by `clusterkit container dockerfile`; the AMI supplies the NVIDIA driver, fabric manager,
# container toolkit and EFA kernel driver; everything below runs in user space.
FROM 763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.7.1-gpu-py312-cu128-ubuntu22.04-ec2

ARG DEBIAN_FRONTEND=noninteractive
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      autoconf automake build-essential ca-certificates curl git libhwloc-dev libtool pkg-config python3 python3-pip \
 && rm -rf /var/lib/apt/lists/*

# nccl-tests, for `clusterkit nccl-test` (all_reduce_perf and friends in /opt/nccl-tests/build).
RUN git clone --depth 1 --branch v2.17.6 https://github.com/NVIDIA/nccl-tests.git /opt/nccl-tests \
 && make -C /opt/nccl-tests -j"$(nproc)" MPI=1 MPI_HOME=/opt/amazon/openmpi CUDA_HOME=/usr/local/cuda

# Minimal EFA settings for libfabric >= 1.18 with aws-ofi-nccl >= 1.7 (huge pages break forked dataloaders).
ENV FI_PROVIDER=efa \
    FI_EFA_USE_HUGE_PAGE=0 \
    NCCL_SOCKET_IFNAME=^docker,lo,veth
