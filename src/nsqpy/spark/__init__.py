"""nsqpy.spark: the ``nsq`` PySpark data source and sink, and the ready-made pipelines.

The only package that imports pyspark. ``NsqDataSource`` reads topics by offset range
through nsqd's log-read API (docs/logread.md; its wire format is ``nsqpy.protocol.logread``)
and publishes rows over nsqd's HTTP API; ``nsqpy.spark.cli`` runs the archive, replay and
transform pipelines. Must not import the broker, the servers or asyncio: it reaches nsqd
over HTTP only. The package itself imports pyspark only when ``NsqDataSource`` or
``SCHEMA`` is asked for, so ``nsqpy pipeline`` can explain that the ``spark`` extra is
missing instead of failing on import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nsqpy.spark.source import SCHEMA, NsqDataSource

__all__ = ["SCHEMA", "NsqDataSource"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from nsqpy.spark import source

        return getattr(source, name)
    raise AttributeError(f"module 'nsqpy.spark' has no attribute {name!r}")
