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
 */
final class KeyState {
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

  byte[] toBytes(int nFields, int nFlags) {
    try {
      ByteArrayOutputStream buf = new ByteArrayOutputStream(64 + recent.size() * 48);
      DataOutputStream out = new DataOutputStream(buf);
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

  static KeyState fromBytes(byte[] bytes, int nFields, int nFlags) {
    KeyState s = new KeyState();
    try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(bytes))) {
      int n = in.readInt();
      for (int i = 0; i < n; i++) {
        long t = in.readLong();
        String id = in.readUTF();
        double[] fields = new double[nFields];
        for (int j = 0; j < nFields; j++) {
          fields[j] = in.readDouble();
        }
        boolean[] flags = new boolean[nFlags];
        for (int j = 0; j < nFlags; j++) {
          flags[j] = in.readBoolean();
        }
        s.recent.add(new Event(t, id, fields, flags));
      }
      int f = in.readInt();
      for (int i = 0; i < f; i++) {
        s.fired.put(in.readUTF(), in.readLong());
      }
      if (in.readBoolean()) {
        s.profileTime = in.readLong();
        s.profile = new double[in.readInt()];
        for (int j = 0; j < s.profile.length; j++) {
          s.profile[j] = in.readDouble();
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return s;
  }
}
