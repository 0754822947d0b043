package io.headrace.realtime;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;

/**
 * The exactly-once sink's epoch records ({@link ExactlyOnceKafkaWriter}: one file per epoch
 * and task under the sink's state directory, lines {@code owner}, {@code offset} and
 * {@code id}) and the read-back of what a task committed since a record's offsets.
 */
final class EpochRecords {
  /**
   * One Hadoop configuration per JVM: a new one per task and epoch parsed Hadoop's default
   * XML resources again on its first use, tens of milliseconds of each epoch's open.
   */
  private static final Configuration CONF = new Configuration();

  private EpochRecords() {}

  /** The file system of the sink's state directory. */
  static FileSystem fileSystem(Path dir) throws IOException {
    return dir.getFileSystem(CONF);
  }

  static String record(Map<TopicPartition, Long> offsets, Set<String> ids) {
    StringBuilder text = new StringBuilder();
    text.append("owner\t").append(ClientPool.JVM_TOKEN).append('\n');
    for (Map.Entry<TopicPartition, Long> e : offsets.entrySet()) {
      text.append("offset\t").append(e.getKey().topic()).append('\t')
          .append(e.getKey().partition()).append('\t').append(e.getValue()).append('\n');
    }
    for (String id : ids) {
      text.append("id\t").append(id).append('\n');
    }
    return text.toString();
  }

  static void writeAtomically(FileSystem fs, Path file, String text) throws IOException {
    fs.mkdirs(file.getParent());
    Path tmp = new Path(file.getParent(), "." + file.getName() + ".tmp");
    try (OutputStream out = fs.create(tmp, true)) {
      out.write(text.getBytes(StandardCharsets.UTF_8));
    }
    fs.delete(file, false);
    if (!fs.rename(tmp, file)) {
      throw new IOException("cannot rename " + tmp + " to " + file);
    }
  }

  static List<String> readLines(FileSystem fs, Path file) throws IOException {
    List<String> lines = new ArrayList<>();
    try (BufferedReader r = new BufferedReader(
        new InputStreamReader(fs.open(file), StandardCharsets.UTF_8))) {
      for (String line = r.readLine(); line != null; line = r.readLine()) {
        lines.add(line);
      }
    }
    return lines;
  }

  static Set<String> readIds(FileSystem fs, Path file) throws IOException {
    Set<String> ids = new HashSet<>();
    if (fs.exists(file)) {
      for (String line : readLines(fs, file)) {
        if (line.startsWith("id\t")) {
          ids.add(line.substring(3));
        }
      }
    }
    return ids;
  }

  static Set<String> scan(KafkaConsumer<byte[], byte[]> consumer,
      Map<TopicPartition, Long> from, Map<TopicPartition, Long> until, String partition) {
    List<TopicPartition> parts = new ArrayList<>(until.keySet());
    consumer.assign(parts);
    for (TopicPartition tp : parts) {
      consumer.seek(tp, from.getOrDefault(tp, 0L));
    }
    Set<String> ids = new HashSet<>();
    // other tasks' open transactions hold the last stable offset back for up to their
    // commit interval (or, for a dead task, until its successor or the coordinator aborts)
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    while (true) {
      boolean done = true;
      for (TopicPartition tp : parts) {
        if (consumer.position(tp) < until.get(tp)) {
          done = false;
        }
      }
      if (done) {
        return ids;
      }
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException("the output topics did not become readable up to "
            + until + " (read_committed) within 60 s");
      }
      for (ConsumerRecord<byte[], byte[]> rec : consumer.poll(Duration.ofMillis(200))) {
        Header h = rec.headers().lastHeader(ExactlyOnceKafkaWriter.ID_HEADER);
        Header part = rec.headers().lastHeader(ExactlyOnceKafkaWriter.PARTITION_HEADER);
        if (h != null && part != null
            && partition.equals(new String(part.value(), StandardCharsets.UTF_8))) {
          ids.add(new String(h.value(), StandardCharsets.UTF_8));
        }
      }
    }
  }
}
