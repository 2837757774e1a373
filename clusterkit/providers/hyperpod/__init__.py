"""The `hyperpod` provider: Slurm clusters on Amazon SageMaker HyperPod, from the same cluster specs and presets.

    request  spec -> the exact keyword arguments of boto3's `sagemaker.create_cluster` (pure)
    model    a request checked against botocore's service model: types, ranges, enums, patterns (offline)
    rules    HyperPod's own rules, one small function each, one module per topic
    plan     the provider's typed plan details and the state its records keep
    controller  how SSH reaches the controller node from elsewhere, through SSM Session Manager (checked values only)
    cluster  the provider (plan / prepare / apply / open) and HyperPodCluster (describe / resize / replace_nodes /
             delete)

boto3 and botocore are imported inside functions only, so importing this package stays cheap.
"""
