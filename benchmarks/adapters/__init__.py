"""One module per system measured by the benchmarks (shardwise's own and each peer's).

Each adapter function runs inside a worker subprocess, in the system's environment, and
returns a JSON-able dict. Heavy packages are imported inside the functions: a peer's
virtualenv has only that peer's packages (and never shardwise).
"""
