"""The only protobuf edge: REAPI, Workers and Jobs messages, JSON documents and spec text <-> rbs.model."""
