"""The shape of subjects/topology.yaml, the streams, consumers, buckets and subjects the runtime
provisions and speaks (subjects.py reads it into the declarations the code uses). The file ships
with the package; `{prefix}`, `{pool}` and the like are filled in when it is read.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict


class StreamSpec(TypedDict):
    name: str
    retention: str
    duplicate_window_s: float
    max_age_s: float  # 0: no age limit
    subjects: NotRequired[list[str]]
    store_share: NotRequired[float]  # of NOETL_STREAM_STORE_BYTES
    discard: NotRequired[str]
    follows_duplicate_window: NotRequired[bool]  # NOETL_STREAM_DUPLICATE_WINDOW replaces it
    allow_msg_schedules: NotRequired[bool]
    allow_msg_ttl: NotRequired[bool]
    max_msgs_per_subject: NotRequired[int]
    source: NotRequired[str]  # a stream fed from another one
    source_subjects: NotRequired[list[str]]


class ConsumerSpec(TypedDict):
    stream: str
    durable: str
    filter_subjects: list[str]
    ack_wait_s: float
    max_deliver: int
    per_pool: NotRequired[bool]  # one durable per worker pool


class RouterSpec(TypedDict):
    stream: str
    partitions: int
    durable: str
    group: str
    pin_ttl_s: float
    ack_wait_s: float
    max_deliver: int
    legacy_durable: str


class BucketSpec(TypedDict):
    name: str
    history: int
    ttl_s: NotRequired[float]
    store_share: NotRequired[float]


class ObjectStoreSpec(TypedDict):
    name: str
    ttl_s: NotRequired[float]
    store_share: NotRequired[float]


class TopologyFile(TypedDict):
    subjects: dict[str, str]
    streams: list[StreamSpec]
    consumers: list[ConsumerSpec]
    router: RouterSpec
    buckets: list[BucketSpec]
    object_stores: NotRequired[list[ObjectStoreSpec]]
