"""README.md's first example, as a file: `sparkstate run examples/pipeline.py` or `python examples/pipeline.py`."""

from sparkstate import Job, KeyedProcessFunction, ParquetSink, UpiPayments, ValueStateDescriptor


class RunningSum(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", int, default=0))
        self.total = ctx.get_state(ValueStateDescriptor("total", float, default=0.0))

    def process_element(self, event, ctx):
        self.count.update(self.count.value() + 1)
        self.total.update(self.total.value() + event["amount"])
        yield {"merchant_id": ctx.get_current_key(), "count": self.count.value(), "total": self.total.value()}


job = (
    Job("running-sum")
    .source(UpiPayments(events=200_000, merchants=10_000))
    .key_by("merchant_id")
    .process(RunningSum(), output_schema="merchant_id string, count bigint, total double")
    .sink(ParquetSink("out/running-sum"))
)

if __name__ == "__main__":
    result = job.run(checkpoint_dir="checkpoints/running-sum")
    print(f"{result.events:,} events in {result.seconds:.1f} s")
