"""The RocketMQ name server role of a controller node (DESIGN.md §12, port 9876).

`routes` (pure) builds TopicRouteData and ClusterInfo from the brokers' registrations and
the controller's replicated state; `registry` (pure) holds the registrations; `bodies`
(pure) decodes headers and bodies; `server` is the asyncio shell on
brokergroup_remoting.net; `keys` reads the client key pair.
"""
