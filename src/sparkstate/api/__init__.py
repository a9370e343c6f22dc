"""What users write: keyed functions, their contexts, state descriptors, time and schemas.

Nothing here imports pyspark; the same classes run in the test harness and on Spark.
"""

from sparkstate.api.functions import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    Context,
    KeyedProcessFunction,
    OnTimerContext,
    RuntimeContext,
    TimeDomain,
    TimerService,
)
from sparkstate.api.schema import Schema
from sparkstate.api.state import (
    AggregateFunction,
    AggregatingState,
    AggregatingStateDescriptor,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReducingState,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueState,
    ValueStateDescriptor,
)
from sparkstate.api.time import WatermarkStrategy

__all__ = [
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "AggregateFunction",
    "AggregatingState",
    "AggregatingStateDescriptor",
    "Context",
    "KeyedProcessFunction",
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "OnTimerContext",
    "ReducingState",
    "ReducingStateDescriptor",
    "RuntimeContext",
    "Schema",
    "StateDescriptor",
    "TimeDomain",
    "TimerService",
    "ValueState",
    "ValueStateDescriptor",
    "WatermarkStrategy",
]
