"""The software stack on accelerated nodes: container recipes, container run flags, doctor, nccl-tests.

Layers follow the AMI-versus-container table (driver, fabric manager, container toolkit and EFA
driver on the AMI; libfabric, CUDA, NCCL, aws-ofi-nccl and the framework in the container).
"""
