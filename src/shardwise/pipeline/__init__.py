"""Processing pipelines: operators on Arrow batches, run on any backend, committed atomically."""

from shardwise.pipeline.api import Pipeline, read_jsonl, read_parquet, read_webdataset, resplit
from shardwise.pipeline.runner import RunResult, Sink

__all__ = ["Pipeline", "RunResult", "Sink", "read_jsonl", "read_parquet", "read_webdataset", "resplit"]
