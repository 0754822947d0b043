package io.headrace.realtime;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * A compiled rule set, as headrace.realtime.rules emits it (JSON), resolved against the input
 * schema: every column is an index. Immutable, serializable (it travels to the executors).
 *
 * <p>Input rows carry: the key, a kind column ("event" or "profile"), an id, an event time in
 * epoch ms, the numeric fields the rules read, boolean flag columns (predicates Spark SQL
 * computed before this operator), profile fields (on profile rows) and carried columns copied
 * into alerts.
 */
public final class RuleSpec implements Serializable {
  private static final long serialVersionUID = 1L;

  /** One rule; {@code type} is window, burst, speed or profile_outlier. */
  public static final class Rule implements Serializable {
    private static final long serialVersionUID = 1L;
    final String name;
    final String type;
    final double weight;
    final long cooldownMs;
    final long windowMs;
    final long hopMs;
    final boolean sum;
    final double atLeast;
    final int field;      // index into the event's fields (sum, speed lat, outlier value); -1
    final int field2;     // speed lon; -1
    final int where;      // index into the event's flags, or -1: rows counted
    final int when;       // index into the event's flags, or -1: the row must satisfy it
    final double above;   // speed km/h, outlier sigmas
    final double factor;  // outlier factor of the mean
    final int mean;       // profile field indexes (outlier)
    final int std;

    Rule(JsonNode n, List<String> fields, List<String> flags, List<String> profile) {
      name = n.get("name").asText();
      type = n.get("type").asText();
      weight = n.path("weight").asDouble(0.5);
      cooldownMs = n.path("cooldown_ms").asLong(0);
      windowMs = n.path("window_ms").asLong(0);
      hopMs = n.path("hop_ms").asLong(windowMs);
      sum = "sum".equals(n.path("agg").asText("count"));
      atLeast = n.path("at_least").asDouble(0);
      field = indexOf(fields, n.path("field").asText(null));
      field2 = indexOf(fields, n.path("field2").asText(null));
      where = indexOf(flags, n.path("where").asText(null));
      when = indexOf(flags, n.path("when").asText(null));
      above = n.path("above").asDouble(0);
      factor = n.path("factor").asDouble(0);
      mean = indexOf(profile, n.path("mean").asText(null));
      std = indexOf(profile, n.path("std").asText(null));
      if (!List.of("window", "burst", "speed", "profile_outlier").contains(type)) {
        throw new IllegalArgumentException("unknown rule type " + type + " in rule " + name);
      }
      if (("window".equals(type) || "burst".equals(type)) && windowMs <= 0) {
        throw new IllegalArgumentException("rule " + name + " needs window_ms > 0");
      }
      if ("window".equals(type) && (hopMs <= 0 || hopMs > windowMs)) {
        throw new IllegalArgumentException("rule " + name + " needs 0 < hop_ms <= window_ms");
      }
    }
  }

  final int key;
  final int kind;
  final int id;
  final int time;
  final int[] fieldCols;
  final int[] flagCols;
  final int[] profileCols;
  final int[] carryCols;
  final long keepMs;
  final long stateTtlMs;
  final List<Rule> rules;
  final StructType output;
  final int initKey;         // columns of the initial state (-1 without it)
  final int initTime;        // -1: the initial state has no profile columns
  final int[] initProfileCols;
  final int initState;       // a savepoint's stored value (KeyState bytes), or -1
  /** The header of this operator's stored values (KeyState, schema version 2). */
  final String header;
  private final String[] fieldNames;
  private final String[] flagNames;
  private final String[] profileNames;
  private final String keyName;

  private RuleSpec(JsonNode n, StructType input, StructType initial) {
    key = col(input, n.get("key").asText());
    kind = col(input, n.get("kind").asText());
    id = col(input, n.get("id").asText());
    time = col(input, n.get("time").asText());
    List<String> fields = texts(n.get("fields"));
    List<String> flags = texts(n.get("flags"));
    List<String> profile = texts(n.get("profile"));
    List<String> carry = texts(n.get("carry"));
    keyName = n.get("key").asText();
    fieldNames = fields.toArray(new String[0]);
    flagNames = flags.toArray(new String[0]);
    profileNames = profile.toArray(new String[0]);
    header = header(keyName, fields, flags, profile);
    fieldCols = cols(input, fields);
    flagCols = cols(input, flags);
    profileCols = cols(input, profile);
    carryCols = cols(input, carry);
    keepMs = n.get("keep_ms").asLong();
    stateTtlMs = n.path("state_ttl_ms").asLong(0);
    rules = new ArrayList<>();
    for (JsonNode r : n.get("rules")) {
      rules.add(new Rule(r, fields, flags, profile));
    }
    List<StructField> out = new ArrayList<>();
    out.add(DataTypes.createStructField("key", DataTypes.StringType, false));
    out.add(DataTypes.createStructField("id", DataTypes.StringType, false));
    out.add(DataTypes.createStructField("event_time_ms", DataTypes.LongType, false));
    out.add(DataTypes.createStructField("reasons",
        DataTypes.createArrayType(DataTypes.StringType, false), false));
    out.add(DataTypes.createStructField("score", DataTypes.DoubleType, false));
    for (int c : carryCols) {
      out.add(input.fields()[c]);
    }
    output = DataTypes.createStructType(out);
    if (initial != null) {
      initKey = col(initial, n.get("key").asText());
      initState = has(initial, STATE_COLUMN) ? col(initial, STATE_COLUMN) : -1;
      boolean profiles = initState < 0 || has(initial, n.path("profile_time").asText(""));
      initTime = profiles ? col(initial, n.get("profile_time").asText()) : -1;
      initProfileCols = profiles ? cols(initial, profile) : new int[0];
    } else {
      initKey = -1;
      initTime = -1;
      initProfileCols = new int[0];
      initState = -1;
    }
  }

  /** The initial state's column of stored values (a savepoint's), when it has one. */
  public static final String STATE_COLUMN = "__state";

  /** The operator's name and schema version in the header of its stored values. */
  static final String OPERATOR = "realtime.rules";
  static final int STATE_VERSION = 2;

  private static String header(String key, List<String> fields, List<String> flags,
      List<String> profile) {
    // compact JSON with sorted keys, as headrace.savepoints.state.header writes it
    java.util.TreeMap<String, Object> params = new java.util.TreeMap<>();
    params.put("fields", fields);
    params.put("flags", flags);
    params.put("key", key);
    params.put("profile", profile);
    java.util.TreeMap<String, Object> head = new java.util.TreeMap<>();
    head.put("operator", OPERATOR);
    head.put("params", params);
    head.put("version", STATE_VERSION);
    try {
      return new ObjectMapper().writeValueAsString(head);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  /** This spec's own layout of stored values. */
  KeyState.Layout ownLayout() {
    return KeyState.Layout.identity(fieldNames.length, flagNames.length, profileNames.length);
  }

  /**
   * The layout of values stored under {@code storedHeader}, mapped onto this spec's by name
   * ({@code own} when the header is this spec's). Throws IllegalStateException for a header
   * that is not this operator's or of a newer schema version.
   */
  KeyState.Layout layoutOf(String storedHeader, KeyState.Layout own) {
    if (storedHeader.equals(header)) {
      return own;
    }
    try {
      JsonNode head = new ObjectMapper().readTree(storedHeader);
      if (!OPERATOR.equals(head.path("operator").asText())
          || head.path("version").asInt() > STATE_VERSION) {
        throw new IllegalStateException("stored state " + storedHeader + " is not "
            + OPERATOR + " state of schema version " + STATE_VERSION + " or older");
      }
      JsonNode params = head.path("params");
      return new KeyState.Layout(
          mapping(texts(params.get("fields")), fieldNames), fieldNames.length,
          mapping(texts(params.get("flags")), flagNames), flagNames.length,
          mapping(texts(params.get("profile")), profileNames), profileNames.length);
    } catch (IOException e) {
      throw new IllegalStateException("unreadable state header " + storedHeader, e);
    }
  }

  private static int[] mapping(List<String> stored, String[] mine) {
    List<String> names = List.of(mine);
    int[] out = new int[stored.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = names.indexOf(stored.get(i));
    }
    return out;
  }

  private static boolean has(StructType schema, String name) {
    for (StructField f : schema.fields()) {
      if (f.name().equals(name)) {
        return true;
      }
    }
    return false;
  }

  /**
   * Parses the JSON spec and resolves its columns in {@code input} (and in {@code initial},
   * the schema of the initial profiles, when not null); a clear error if not.
   */
  public static RuleSpec parse(String json, StructType input, StructType initial) {
    try {
      return new RuleSpec(new ObjectMapper().readTree(json), input, initial);
    } catch (IOException e) {
      throw new IllegalArgumentException("invalid rule spec: " + e.getMessage(), e);
    }
  }

  private static List<String> texts(JsonNode n) {
    List<String> out = new ArrayList<>();
    if (n != null) {
      for (JsonNode v : n) {
        out.add(v.asText());
      }
    }
    return out;
  }

  private static int indexOf(List<String> names, String name) {
    if (name == null) {
      return -1;
    }
    int i = names.indexOf(name);
    if (i < 0) {
      throw new IllegalArgumentException("rule spec names " + name + " but does not declare it");
    }
    return i;
  }

  private static int col(StructType input, String name) {
    for (int i = 0; i < input.fields().length; i++) {
      if (input.fields()[i].name().equals(name)) {
        return i;
      }
    }
    throw new IllegalArgumentException("rule spec column " + name + " is not in the input "
        + input.simpleString());
  }

  private static int[] cols(StructType input, List<String> names) {
    int[] out = new int[names.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = col(input, names.get(i));
    }
    return out;
  }
}
