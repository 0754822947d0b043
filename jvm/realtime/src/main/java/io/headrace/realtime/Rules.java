package io.headrace.realtime;

import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.KeyValueGroupedDataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.TimeMode;

/** The entry point Python calls (through py4j): applies a compiled rule set to a stream. */
public final class Rules {
  private Rules() {}

  /**
   * Groups {@code input} by the spec's key column and runs {@link RuleProcessor} on it
   * (update mode: each alert comes out as soon as its row is handled). {@code initial}
   * (a batch Dataset, or null) holds the state to load before the first row: profiles (one
   * row per key with the key, the profile time and the profile fields) and/or a savepoint's
   * stored values (the key and {@link RuleSpec#STATE_COLUMN}, binary; null on a profile
   * row). The result has columns key, id,
   * event_time_ms, reasons, score, then the carried columns. Throws IllegalArgumentException
   * naming what is wrong with the spec.
   */
  public static Dataset<Row> apply(Dataset<Row> input, String specJson, Dataset<Row> initial) {
    RuleSpec spec = RuleSpec.parse(specJson, input.schema(),
        initial == null ? null : initial.schema());
    final int key = spec.key;
    MapFunction<Row, String> byKey = r -> r.getString(key);
    KeyValueGroupedDataset<String, Row> grouped = input.groupByKey(byKey, Encoders.STRING());
    // state TTL (bounding idle keys) is measured in processing time
    TimeMode mode = spec.stateTtlMs > 0 ? TimeMode.ProcessingTime() : TimeMode.None();
    RuleProcessor processor = new RuleProcessor(spec);
    if (initial == null) {
      return grouped.transformWithState(processor, mode, OutputMode.Update(),
          Encoders.row(spec.output));
    }
    final int initKey = spec.initKey;
    MapFunction<Row, String> byInitKey = r -> r.getString(initKey);
    return grouped.transformWithState(processor, mode, OutputMode.Update(),
        initial.groupByKey(byInitKey, Encoders.STRING()), Encoders.row(spec.output),
        Encoders.row(initial.schema()));
  }

  /**
   * Rows the rule operator's tasks in this JVM handled since it started: {profile rows, event
   * rows, alerts}. In local mode (one JVM) that is the whole query's; on a cluster, the
   * driver's share only (zero).
   */
  public static long[] counters() {
    return new long[] {RuleProcessor.COUNTS.get(0), RuleProcessor.COUNTS.get(1),
        RuleProcessor.COUNTS.get(2)};
  }
}
