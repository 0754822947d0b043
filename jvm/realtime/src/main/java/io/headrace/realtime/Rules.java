package io.headrace.realtime;

import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.TimeMode;

/** The entry point Python calls (through py4j): applies a compiled rule set to a stream. */
public final class Rules {
  private Rules() {}

  /**
   * Groups {@code input} by the spec's key column and runs {@link RuleProcessor} on it
   * (update mode: each alert comes out as soon as its row is handled).
   * The result has columns key, id, event_time_ms, reasons, score, then the carried columns.
   * Throws IllegalArgumentException naming what is wrong with the spec.
   */
  public static Dataset<Row> apply(Dataset<Row> input, String specJson) {
    RuleSpec spec = RuleSpec.parse(specJson, input.schema());
    final int key = spec.key;
    MapFunction<Row, String> byKey = r -> r.getString(key);
    return input.groupByKey(byKey, Encoders.STRING())
        .transformWithState(new RuleProcessor(spec),
            // state TTL (bounding idle keys) is measured in processing time
            spec.stateTtlMs > 0 ? TimeMode.ProcessingTime() : TimeMode.None(),
            OutputMode.Update(), Encoders.row(spec.output));
  }
}
