"""POP consumption (issue 35 item 1, docs/pop.md): `state` the pure per-queue core,
`records` the CK/ACK records and receipt handles (pure), `service` the master's shell
(`PopService`, the one API the remoting and gRPC front ends call)."""
