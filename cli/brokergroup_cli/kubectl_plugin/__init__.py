"""`kubectl brokergroup …` (the `kubectl-brokergroup` executable), like `kubectl cnpg`.

- `status GROUP`: the group as the local status view shows it (master,
  masterEpoch, SyncStateSet, offsets, lag), from the BrokerGroup's status;
- `switchover GROUP TARGET`: a pod name or a BrokerId; the operator's answer
  (its Event) decides, so a refusal fails at once with its reason;
- `restart GROUP`: a rolling restart through the operator's safe roll (the
  `kubectl.kubernetes.io/restartedAt` annotation, as `kubectl rollout restart`);
- `report GROUP`: a tarball of the group's objects, events and pod logs,
  Secrets redacted.

The plugin talks to the API server only; the operator owns every decision
(STYLE.md §8). `kube` is the only module that calls the kubernetes client;
`view`, the target resolution and the outcome rules are pure.
"""
