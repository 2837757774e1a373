# GPU training image for EC2 with EFA: CUDA 12.8.1 base.
# Rendered by `clusterkit container dockerfile`; the AMI supplies the NVIDIA driver, fabric manager,
# container toolkit and EFA kernel driver; everything below runs in user space.
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04

ARG DEBIAN_FRONTEND=noninteractive
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      autoconf automake build-essential ca-certificates curl git libhwloc-dev libtool pkg-config python3 python3-pip \
 && rm -rf /var/lib/apt/lists/*

# GDRCopy: user-space library for GPUDirect RDMA copies (its kernel module is on the AMI).
RUN git clone --depth 1 --branch v2.5.1 https://github.com/NVIDIA/gdrcopy.git /tmp/gdrcopy \
 && make -C /tmp/gdrcopy prefix=/opt/gdrcopy CUDA=/usr/local/cuda lib lib_install \
 && rm -rf /tmp/gdrcopy

# EFA user space: libfabric, AWS Open MPI and the aws-ofi-nccl plugin (in /opt/amazon/ofi-nccl).
# No kernel module and no limits file inside a container; the host provides both.
# The installer runs from its own directory, unpacked and removed within one layer.
# hadolint ignore=DL3003
RUN curl -fsSL https://efa-installer.amazonaws.com/aws-efa-installer-1.47.0.tar.gz | tar -xz -C /tmp \
 && cd /tmp/aws-efa-installer \
 && ./efa_installer.sh -y -g -d --skip-kmod --skip-limit-conf --no-verify \
 && rm -rf /tmp/aws-efa-installer

# NCCL v2.29.3-1, built for this CUDA; it takes precedence over any copy in the base.
RUN git clone --depth 1 --branch v2.29.3-1 https://github.com/NVIDIA/nccl.git /opt/nccl \
 && make -C /opt/nccl -j"$(nproc)" src.build CUDA_HOME=/usr/local/cuda

# aws-ofi-nccl 1.16.3 built from its release, instead of the EFA installer's copy.
# hadolint ignore=DL3003
RUN curl -fsSL https://github.com/aws/aws-ofi-nccl/releases/download/v1.16.3/aws-ofi-nccl-1.16.3.tar.gz | tar -xz -C /tmp \
 && cd /tmp/aws-ofi-nccl-1.16.3 \
 && ./configure --prefix=/opt/aws-ofi-nccl --with-libfabric=/opt/amazon/efa --with-cuda=/usr/local/cuda \
      --with-mpi=/opt/amazon/openmpi \
 && make -j"$(nproc)" \
 && make install \
 && rm -rf /tmp/aws-ofi-nccl-1.16.3

# nccl-tests, for `clusterkit nccl-test` (all_reduce_perf and friends in /opt/nccl-tests/build).
RUN git clone --depth 1 --branch v2.17.6 https://github.com/NVIDIA/nccl-tests.git /opt/nccl-tests \
 && make -C /opt/nccl-tests -j"$(nproc)" MPI=1 MPI_HOME=/opt/amazon/openmpi CUDA_HOME=/usr/local/cuda NCCL_HOME=/opt/nccl/build

# The framework, built against CUDA 12.8.
RUN pip3 install --no-cache-dir torch==2.7.1 --index-url https://download.pytorch.org/whl/cu128

ENV LD_LIBRARY_PATH=/opt/aws-ofi-nccl/lib:/opt/nccl/build/lib:/opt/amazon/efa/lib:/opt/amazon/openmpi/lib:/opt/gdrcopy/lib:/usr/local/cuda/lib64
ENV PATH=/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# Minimal EFA settings for libfabric >= 1.18 with aws-ofi-nccl >= 1.7 (huge pages break forked dataloaders).
ENV FI_PROVIDER=efa \
    FI_EFA_USE_HUGE_PAGE=0 \
    NCCL_SOCKET_IFNAME=^docker,lo,veth
