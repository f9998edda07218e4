"""brokergroup broker: commit log store, AutoSwitch HA, ReplicasManager and client protocol."""
