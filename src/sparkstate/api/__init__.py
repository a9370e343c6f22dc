"""What users write: keyed functions, their contexts, state descriptors, time and schemas.

Nothing here imports pyspark; the same classes run in the test harness and on Spark.
"""

from sparkstate.api import agg
from sparkstate.api.checkpointing import CheckpointConfig
from sparkstate.api.functions import (
    DEAD_LETTERS,
    MAX_WATERMARK,
    MIN_WATERMARK,
    Context,
    KeyedProcessFunction,
    OnTimerContext,
    OutputTag,
    RuntimeContext,
    TimeDomain,
    TimerService,
)
from sparkstate.api.io import Guarantee, SinkSpec, SourceSpec
from sparkstate.api.job import JobSettings, WindowPath
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
from sparkstate.api.ttl import StateTtlConfig
from sparkstate.api.windows import (
    EventTimeSessionWindows,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowAssigner,
    WindowContext,
)

__all__ = [
    "DEAD_LETTERS",
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "AggregateFunction",
    "AggregatingState",
    "AggregatingStateDescriptor",
    "CheckpointConfig",
    "Context",
    "EventTimeSessionWindows",
    "Guarantee",
    "JobSettings",
    "KeyedProcessFunction",
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "OnTimerContext",
    "OutputTag",
    "ProcessWindowFunction",
    "ReducingState",
    "ReducingStateDescriptor",
    "RuntimeContext",
    "Schema",
    "SinkSpec",
    "SourceSpec",
    "SlidingEventTimeWindows",
    "StateDescriptor",
    "StateTtlConfig",
    "TimeDomain",
    "TimeWindow",
    "TimerService",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "ValueState",
    "ValueStateDescriptor",
    "WatermarkStrategy",
    "WindowAssigner",
    "WindowContext",
    "WindowPath",
    "agg",
]
