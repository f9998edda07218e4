"""The kopf operator of BrokerGroups (DESIGN.md §5, docs/kubernetes.md).

Pure decisions live in `model`, `labels`, `conditions`, `planner`,
`liveness`, `resources` and `status` (no I/O, no clocks: time comes in as an
argument); `kube` and `handlers` are the thin shells that read the cluster
and the controller, call them and apply the result. The operator owns
Kubernetes objects, labels and roll order; the controller owns elections:
the operator only ever *asks* for a switchover (admin ElectMaster).
"""
