package io.headrace.realtime;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * One key's state: its recent events sorted by (event time, id), when each rule last fired,
 * and its profile (the latest by profile time). Stored as one binary value per key.
 *
 * <p>The stored layout is a public format (savepoints copy it; a newer operator must read
 * it). Schema version 2 opens with {@link #V2} and a header, compact JSON naming the
 * operator, the version and the layout's parameters: the key column and the names of the
 * event fields, flags and profile fields, in the order the values follow. A reader with a
 * different rule set maps the values by name ({@link Layout}): a field or flag the writer
 * did not have reads as NaN / false, one the reader no longer has is dropped. Version 1
 * (no header, the first int is the event count, never negative) is read with the reader's
 * own layout, as before.
 */
final class KeyState {
  /** Opens a version-2 value; a version-1 value opens with its (non-negative) event count. */
  static final int V2 = -2;

  /**
   * How a stored value's fields, flags and profile fields map onto the reader's: index maps
   * from the writer's position to the reader's (-1: the reader has no such column; their
   * lengths are the writer's counts), and the reader's counts.
   */
  static final class Layout {
    final int nFields;
    final int nFlags;
    final int[] fields;
    final int[] flags;
    final int[] profile;
    final int nProfile;

    Layout(int[] fields, int nFields, int[] flags, int nFlags, int[] profile, int nProfile) {
      this.fields = fields;
      this.nFields = nFields;
      this.flags = flags;
      this.nFlags = nFlags;
      this.profile = profile;
      this.nProfile = nProfile;
    }

    /** The identity layout of a reader that wrote the value itself (or of version 1). */
    static Layout identity(int nFields, int nFlags, int nProfile) {
      return new Layout(range(nFields), nFields, range(nFlags), nFlags, range(nProfile),
          nProfile);
    }

    private static int[] range(int n) {
      int[] out = new int[n];
      for (int i = 0; i < n; i++) {
        out[i] = i;
      }
      return out;
    }
  }
  /** One event: what the rules read of it. */
  static final class Event {
    final long t;
    final String id;
    final double[] fields;
    final boolean[] flags;

    Event(long t, String id, double[] fields, boolean[] flags) {
      this.t = t;
      this.id = id;
      this.fields = fields;
      this.flags = flags;
    }
  }

  final List<Event> recent = new ArrayList<>();
  final Map<String, Long> fired = new HashMap<>();
  long profileTime = Long.MIN_VALUE;
  double[] profile;  // null until a profile row arrived; NaN for a null field

  /** The version-2 value: {@link #V2}, {@code header} (RuleSpec.header), the state. */
  byte[] toBytes(String header, int nFields, int nFlags) {
    try {
      ByteArrayOutputStream buf = new ByteArrayOutputStream(
          64 + header.length() + recent.size() * 48);
      DataOutputStream out = new DataOutputStream(buf);
      out.writeInt(V2);
      out.writeUTF(header);
      out.writeInt(recent.size());
      for (Event e : recent) {
        out.writeLong(e.t);
        out.writeUTF(e.id);
        for (int i = 0; i < nFields; i++) {
          out.writeDouble(e.fields[i]);
        }
        for (int i = 0; i < nFlags; i++) {
          out.writeBoolean(e.flags[i]);
        }
      }
      out.writeInt(fired.size());
      for (Map.Entry<String, Long> f : fired.entrySet()) {
        out.writeUTF(f.getKey());
        out.writeLong(f.getValue());
      }
      out.writeBoolean(profile != null);
      if (profile != null) {
        out.writeLong(profileTime);
        out.writeInt(profile.length);
        for (double v : profile) {
          out.writeDouble(v);
        }
      }
      out.flush();
      return buf.toByteArray();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /**
   * A stored value, either version, in the reader's layout. {@code layouts} maps a version-2
   * header to its layout (RuleSpec.layoutOf, cached: every key of a query has the same one);
   * a version-1 value is read with {@code own}.
   */
  static KeyState fromBytes(byte[] bytes, Layout own,
      java.util.function.Function<String, Layout> layouts) {
    KeyState s = new KeyState();
    try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(bytes))) {
      int n = in.readInt();
      Layout layout = own;
      if (n == V2) {
        layout = layouts.apply(in.readUTF());
        n = in.readInt();
      }
      for (int i = 0; i < n; i++) {
        long t = in.readLong();
        String id = in.readUTF();
        double[] fields = new double[own.nFields];
        java.util.Arrays.fill(fields, Double.NaN);
        for (int j = 0; j < layout.fields.length; j++) {  // the writer's fields
          double v = in.readDouble();
          if (layout.fields[j] >= 0) {
            fields[layout.fields[j]] = v;
          }
        }
        boolean[] flags = new boolean[own.nFlags];
        for (int j = 0; j < layout.flags.length; j++) {  // the writer's flags
          boolean v = in.readBoolean();
          if (layout.flags[j] >= 0) {
            flags[layout.flags[j]] = v;
          }
        }
        s.recent.add(new Event(t, id, fields, flags));
      }
      int f = in.readInt();
      for (int i = 0; i < f; i++) {
        s.fired.put(in.readUTF(), in.readLong());
      }
      if (in.readBoolean()) {
        s.profileTime = in.readLong();
        int stored = in.readInt();
        s.profile = new double[layout == own ? stored : own.nProfile];
        java.util.Arrays.fill(s.profile, Double.NaN);
        for (int j = 0; j < stored; j++) {
          double v = in.readDouble();
          int to = layout == own ? j : (j < layout.profile.length ? layout.profile[j] : -1);
          if (to >= 0) {
            s.profile[to] = v;
          }
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return s;
  }

  /**
   * Takes {@code saved} (a savepoint's state of this key) into this state: its events (an
   * id already here is kept once), the later firing of each rule, the newer profile.
   */
  void merge(KeyState saved) {
    java.util.Set<String> ids = new java.util.HashSet<>();
    for (Event e : recent) {
      ids.add(e.id);
    }
    for (Event e : saved.recent) {
      if (ids.add(e.id)) {
        recent.add(e);
      }
    }
    recent.sort(java.util.Comparator.<Event>comparingLong(e -> e.t).thenComparing(e -> e.id));
    saved.fired.forEach((rule, t) -> fired.merge(rule, t, Math::max));
    if (saved.profile != null && (profile == null || saved.profileTime >= profileTime)) {
      profile = saved.profile;
      profileTime = saved.profileTime;
    }
  }
}
