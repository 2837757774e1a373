# Trainium training image for EC2 with EFA: Ubuntu 22.04 base.
# Rendered by `clusterkit container dockerfile`; the AMI supplies the Neuron driver (aws-neuronx-dkms)
# and the EFA kernel driver; run with --device /dev/neuronN and /dev/infiniband/uverbsN.
FROM ubuntu:22.04

ARG DEBIAN_FRONTEND=noninteractive
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl gnupg python3 python3-pip python3-venv \
 && rm -rf /var/lib/apt/lists/*

# EFA user space: libfabric and AWS Open MPI; no kernel module and no limits file in a container.
# The installer runs from its own directory, unpacked and removed within one layer.
# hadolint ignore=DL3003
RUN curl -fsSL https://efa-installer.amazonaws.com/aws-efa-installer-1.47.0.tar.gz | tar -xz -C /tmp \
 && cd /tmp/aws-efa-installer \
 && ./efa_installer.sh -y -d --skip-kmod --skip-limit-conf --no-verify \
 && rm -rf /tmp/aws-efa-installer

# Neuron runtime, collectives (over EFA) and tools (neuron-ls, neuron-top) from Neuron's apt repository.
RUN curl -fsSL https://apt.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB \
      | gpg --dearmor -o /usr/share/keyrings/neuron.gpg \
 && echo "deb [signed-by=/usr/share/keyrings/neuron.gpg] https://apt.repos.neuron.amazonaws.com jammy main" \
      > /etc/apt/sources.list.d/neuron.list \
 && apt-get update \
 && apt-get install -y --no-install-recommends \
      "aws-neuronx-runtime-lib=2.30.51.0*" \
      "aws-neuronx-collectives=2.30.59.0*" \
      "aws-neuronx-tools=2.28.23.0*" \
 && rm -rf /var/lib/apt/lists/*

# Compiler and framework from Neuron's pip repository.
RUN pip3 install --no-cache-dir --extra-index-url https://pip.repos.neuron.amazonaws.com \
      neuronx-cc==2.23.6484.0 \
      "torch-neuronx==2.9.0.*" \
      neuronx-distributed==0.17.26814

ENV LD_LIBRARY_PATH=/opt/aws/neuron/lib:/opt/amazon/efa/lib:/opt/amazon/openmpi/lib
ENV PATH=/opt/aws/neuron/bin:/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ENV FI_PROVIDER=efa \
    FI_EFA_FORK_SAFE=1 \
    MALLOC_ARENA_MAX=64
