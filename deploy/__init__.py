"""Running ragmesh: the local supervisor behind `make run`, and deployment manifests."""
