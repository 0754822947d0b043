package io.headrace.realtime;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.atomic.AtomicLongArray;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessorWithInitialState;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The generic rule operator: Java transformWithState, so Spark's Real-Time Mode can run it.
 *
 * <p>Per key, rows are handled in (event time, id) order within a call. An event row already
 * seen (same id) raises nothing; otherwise it joins the key's recent events (pruned to
 * {@code keep_ms} of event time behind the newest), each rule is evaluated with it, and a rule
 * that fired for the key within its cool-down (in event time, either direction) stays quiet.
 * A profile row replaces the key's profile unless an older one by profile time; so do the
 * initial profiles (a batch read of the profile topic, applied before the first row when the
 * query starts without a checkpoint). The initial state may also hold a savepoint's stored
 * values (a query started from a savepoint), taken in whatever rule set wrote them
 * (KeyState's layout maps them by name). One output row per event that raised at least one rule. Semantics match headrace.pipelines.fraud.rules'
 * CardState, the micro-batch path's evaluator, rule for rule.
 */
public final class RuleProcessor
    extends StatefulProcessorWithInitialState<String, Row, Row, Row> {
  private static final long serialVersionUID = 1L;
  private static final double EARTH_RADIUS_KM = 6371.0088;
  private static final Comparator<KeyState.Event> ORDER =
      Comparator.<KeyState.Event>comparingLong(e -> e.t).thenComparing(e -> e.id);

  /** Rows handled by this JVM's tasks: profile rows, event rows, alerts (Rules.counters). */
  static final AtomicLongArray COUNTS = new AtomicLongArray(3);

  private final RuleSpec spec;
  private transient ValueState<byte[]> state;
  private transient KeyState.Layout own;
  private transient java.util.Map<String, KeyState.Layout> layouts;

  public RuleProcessor(RuleSpec spec) {
    this.spec = spec;
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    // No TTL (Duration.ZERO) unless asked: TTL needs processing-time mode (Rules.apply).
    TTLConfig ttl = new TTLConfig(Duration.ofMillis(Math.max(0, spec.stateTtlMs)));
    state = getHandle().getValueState("key", Encoders.BINARY(), ttl);
    own = spec.ownLayout();
    layouts = new java.util.HashMap<>();
  }

  /** A stored value (this operator's, either schema version) in this spec's layout. */
  private KeyState read(byte[] bytes) {
    return KeyState.fromBytes(bytes, own,
        h -> layouts.computeIfAbsent(h, x -> spec.layoutOf(x, own)));
  }

  private void write(KeyState s) {
    state.update(s.toBytes(spec.header, spec.fieldCols.length, spec.flagCols.length));
  }

  @Override
  public scala.collection.Iterator<Row> handleInputRows(
      String key, scala.collection.Iterator<Row> rows, TimerValues timerValues) {
    KeyState s = state.exists() ? read(state.get()) : new KeyState();
    List<Row> events = new ArrayList<>();
    List<Row> passed = new ArrayList<>();
    boolean changed = false;
    for (Iterator<Row> it = CollectionConverters.asJava(rows); it.hasNext(); ) {
      Row r = it.next();
      String kind = r.getString(spec.kind);
      if ("profile".equals(kind)) {
        changed |= takeProfile(s, r);
        COUNTS.incrementAndGet(0);
      } else if ("pass".equals(kind)) {
        passed.add(passThrough(key, r));
      } else {
        events.add(r);
      }
    }
    events.sort(Comparator.<Row>comparingLong(r -> r.getLong(spec.time))
        .thenComparing(r -> r.getString(spec.id)));
    List<Row> out = new ArrayList<>(passed);
    for (Row r : events) {
      changed = true;
      Row alert = evaluate(s, key, r);
      if (alert != null) {
        out.add(alert);
      }
    }
    if (changed) {
      write(s);
    }
    COUNTS.addAndGet(1, events.size());
    COUNTS.addAndGet(2, out.size() - passed.size());  // alerts only: passed rows are not
    return CollectionConverters.asScala(out.iterator());
  }

  @Override
  public void handleInitialState(String key, Row initial, TimerValues timerValues) {
    // a row of the initial state is a savepoint's stored value of the key (STATE_COLUMN)
    // or an initial profile; a key may have both
    KeyState s = state.exists() ? read(state.get()) : new KeyState();
    if (spec.initState >= 0 && !initial.isNullAt(spec.initState)) {
      s.merge(read((byte[]) initial.get(spec.initState)));
      write(s);
    } else if (spec.initTime >= 0 && !initial.isNullAt(spec.initTime)
        && takeProfile(s, initial, spec.initTime, spec.initProfileCols)) {
      write(s);
    }
  }

  private boolean takeProfile(KeyState s, Row r) {
    return takeProfile(s, r, spec.time, spec.profileCols);
  }

  private static boolean takeProfile(KeyState s, Row r, int time, int[] cols) {
    long t = r.getLong(time);
    if (s.profile != null && t < s.profileTime) {
      return false;
    }
    double[] p = new double[cols.length];
    for (int i = 0; i < p.length; i++) {
      p[i] = r.isNullAt(cols[i]) ? Double.NaN : ((Number) r.get(cols[i])).doubleValue();
    }
    s.profile = p;
    s.profileTime = t;
    return true;
  }

  private Row evaluate(KeyState s, String key, Row r) {
    String id = r.getString(spec.id);
    for (KeyState.Event e : s.recent) {
      if (e.id.equals(id)) {
        return null;  // seen before (replayed input): raises nothing new
      }
    }
    double[] fields = new double[spec.fieldCols.length];
    for (int i = 0; i < fields.length; i++) {
      int c = spec.fieldCols[i];
      fields[i] = r.isNullAt(c) ? Double.NaN : ((Number) r.get(c)).doubleValue();
    }
    boolean[] flags = new boolean[spec.flagCols.length];
    for (int i = 0; i < flags.length; i++) {
      int c = spec.flagCols[i];
      flags[i] = !r.isNullAt(c) && r.getBoolean(c);
    }
    KeyState.Event ev = new KeyState.Event(r.getLong(spec.time), id, fields, flags);
    s.recent.add(ev);
    s.recent.sort(ORDER);
    long newest = s.recent.get(s.recent.size() - 1).t;
    s.recent.removeIf(e -> e.t < newest - spec.keepMs);
    int at = s.recent.indexOf(ev);
    List<String> reasons = new ArrayList<>();
    double miss = 1.0;
    if (at >= 0) {
      for (RuleSpec.Rule rule : spec.rules) {
        if (!hit(rule, s, ev, at)) {
          continue;
        }
        Long last = s.fired.get(rule.name);
        if (last != null && Math.abs(ev.t - last) < rule.cooldownMs) {
          continue;
        }
        s.fired.put(rule.name, ev.t);
        reasons.add(rule.name);
        miss *= 1.0 - rule.weight;
      }
    }
    s.fired.values().removeIf(v -> v < newest - spec.keepMs);
    if (reasons.isEmpty()) {
      return null;
    }
    Object[] values = new Object[5 + spec.carryCols.length];
    values[0] = key;
    values[1] = id;
    values[2] = ev.t;
    values[3] = CollectionConverters.asScala(reasons).toSeq();
    values[4] = Math.round((1.0 - miss) * 10_000) / 10_000.0;
    for (int i = 0; i < spec.carryCols.length; i++) {
      values[5 + i] = r.get(spec.carryCols[i]);
    }
    return RowFactory.create(values);
  }

  private boolean hit(RuleSpec.Rule rule, KeyState s, KeyState.Event ev, int at) {
    if (rule.when >= 0 && !ev.flags[rule.when]) {
      return false;
    }
    switch (rule.type) {
      case "window":
        return window(rule, s, ev);
      case "burst":
        return burst(rule, s, ev);
      case "speed":
        return speed(rule, s, at);
      default:
        return outlier(rule, s, ev);
    }
  }

  /** Any hopping window [start, start + window) holding ev reaches the threshold. */
  private static boolean window(RuleSpec.Rule rule, KeyState s, KeyState.Event ev) {
    long first = ev.t - Math.floorMod(ev.t, rule.hopMs);
    for (long start = first; start > ev.t - rule.windowMs; start -= rule.hopMs) {
      double total = 0;
      for (KeyState.Event e : s.recent) {
        if (e.t >= start && e.t < start + rule.windowMs
            && (rule.where < 0 || e.flags[rule.where])) {
          total += rule.sum ? e.fields[rule.field] : 1;
        }
      }
      if (total >= rule.atLeast) {
        return true;
      }
    }
    return false;
  }

  /** Among rows within window of ev (both sides), some window [s, s + window] holds enough. */
  private static boolean burst(RuleSpec.Rule rule, KeyState s, KeyState.Event ev) {
    if (rule.where >= 0 && !ev.flags[rule.where]) {
      return false;  // only a row that counts can fire it
    }
    List<Long> near = new ArrayList<>();
    for (KeyState.Event e : s.recent) {
      if ((rule.where < 0 || e.flags[rule.where]) && Math.abs(e.t - ev.t) <= rule.windowMs) {
        near.add(e.t);
      }
    }
    for (long start : near) {
      int n = 0;
      for (long t : near) {
        if (t >= start && t <= start + rule.windowMs) {
          n++;
        }
      }
      if (n >= rule.atLeast) {
        return true;
      }
    }
    return false;
  }

  /** Implied speed to either neighbour in event time exceeds the threshold. */
  private static boolean speed(RuleSpec.Rule rule, KeyState s, int at) {
    KeyState.Event ev = s.recent.get(at);
    for (int j : new int[] {at - 1, at + 1}) {
      if (j < 0 || j >= s.recent.size()) {
        continue;
      }
      KeyState.Event o = s.recent.get(j);
      if (kmh(o.fields[rule.field], o.fields[rule.field2], o.t,
          ev.fields[rule.field], ev.fields[rule.field2], ev.t) > rule.above) {
        return true;
      }
    }
    return false;
  }

  private static boolean outlier(RuleSpec.Rule rule, KeyState s, KeyState.Event ev) {
    if (s.profile == null) {
      return false;
    }
    double mean = s.profile[rule.mean];
    double std = s.profile[rule.std];
    double v = ev.fields[rule.field];
    if (Double.isNaN(mean) || Double.isNaN(std) || Double.isNaN(v)) {
      return false;
    }
    return v > mean + rule.above * std && v > rule.factor * mean;
  }

  static double kmh(double lat1, double lon1, long t1, double lat2, double lon2, long t2) {
    double p1 = Math.toRadians(lat1);
    double p2 = Math.toRadians(lat2);
    double dp = p2 - p1;
    double dl = Math.toRadians(lon2 - lon1);
    double a = Math.pow(Math.sin(dp / 2), 2)
        + Math.cos(p1) * Math.cos(p2) * Math.pow(Math.sin(dl / 2), 2);
    double km = 2 * EARTH_RADIUS_KM * Math.asin(Math.min(1.0, Math.sqrt(a)));
    double hours = Math.abs(t2 - t1) / 3_600_000.0;
    if (hours == 0) {
      return km > 0 ? Double.POSITIVE_INFINITY : 0.0;
    }
    return km / hours;
  }

  /** A pass-through row (RuleSet.passthrough) as an output row: no reasons, score 0. */
  private Row passThrough(String key, Row r) {
    Object[] values = new Object[5 + spec.carryCols.length];
    values[0] = key;
    values[1] = r.isNullAt(spec.id) ? null : r.getString(spec.id);
    values[2] = r.getLong(spec.time);
    values[3] = CollectionConverters.asScala(new ArrayList<String>()).toSeq();
    values[4] = 0.0;
    for (int i = 0; i < spec.carryCols.length; i++) {
      values[5 + i] = r.get(spec.carryCols[i]);
    }
    return RowFactory.create(values);
  }
}
