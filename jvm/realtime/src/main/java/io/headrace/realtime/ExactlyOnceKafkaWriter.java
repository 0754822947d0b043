package io.headrace.realtime;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * An exactly-once Kafka sink for Spark Real-Time Mode (a JVM {@link ForeachWriter}, which RTM
 * allows and feeds row by row as rows arrive): what read_committed consumers read is every
 * output row exactly once, through any crash of the driver, an executor or the broker.
 *
 * <p>Rows have columns {@code key} (string or binary, may be null), {@code value} (string or
 * binary), {@code id} (string: the row's identity, the same when a replay produces the row
 * again; the fraud path uses the transaction id), optionally {@code topic} (string: where the
 * row goes, one of the writer's topics; null or absent: the first) and optionally
 * {@code headers} (map of string to string).
 *
 * <p>Design.
 *
 * <ul>
 *   <li>Short transactions. Each task (query id, partition) has one transactional producer,
 *       {@code transactional.id = headrace-rt-<query id>-<partition>}. Rows are sent inside a
 *       transaction that a flusher thread commits once no row came for a tick of it
 *       ({@code commitIntervalMs / 4}), once it is {@code commitIntervalMs} old, or at
 *       {@code maxRecords} rows: an output row is readable with read_committed within about
 *       that interval plus one commit round trip, not at the checkpoint interval; a lone row
 *       (an alert among many transactions) within about two ticks. Rows that come close
 *       together share a transaction, so a busy task commits at most once per interval.
 *       {@code initTransactions} in {@link #open} fences an older incarnation of the task and
 *       aborts its open transaction, so what a dead task had not committed is never read.
 *   <li>Skipping on replay. After a restart Spark replays the input since the last
 *       checkpoint, and the alerts of that stretch come again; some were already committed
 *       by short transactions. Each record carries headers {@code headrace.id} (the row's id)
 *       and {@code headrace.task} (the task partition; a replay routes a row to the same
 *       one). Before writing anything in an epoch, a task's first attempt records in
 *       {@code <stateDir>/<epoch>-<partition>} (atomically) the output topics' end offsets
 *       at that moment (or a little earlier: see the boundaries below). A retry of the epoch (the file exists) reads the output from those
 *       offsets to its end with read_committed (after its own {@code initTransactions}, so
 *       nothing of the crashed attempt is still open) and skips rows whose id one of its
 *       earlier attempts committed.
 *   <li>Replays that span epochs. The retried batch may end (at the checkpoint interval)
 *       before reaching the input the crashed attempt had reached, so the rest of the replay
 *       comes in later epochs. A task that closes an epoch successfully carries the ids of
 *       its skip set it did not meet into the next epoch's record (below); that epoch's first
 *       attempt starts from them. Skipping an id already committed is always safe (one row
 *       per id), so the set only has to be large enough, never exact; for the same reason
 *       a record's offsets only have to be low enough (a retry then reads a little more).
 *       Files of epochs older than the previous one are removed (an epoch starts once the
 *       one before has committed).
 *   <li>Checkpoint boundaries. Each epoch starts new tasks, and the stream waits for them at
 *       every boundary, so an epoch's open does no round trip it can avoid. A task that
 *       closes its epoch successfully gives its producer (between transactions) back to
 *       {@link ClientPool} and prepares the next epoch's record,
 *       {@code <epoch + 1>-<partition>.next}: this JVM as owner, the output's end offsets
 *       captured in the background a second into the epoch (after its own record: every
 *       output row of the next epoch lies after them) and the carried ids. The next epoch's
 *       first attempt renames it to its own record (the rename, like the record's existence,
 *       marks the first attempt) instead of asking the broker for end offsets and writing
 *       one, and takes the pooled producer instead of building one and calling
 *       {@code initTransactions} again when the record names this JVM (no incarnation
 *       elsewhere has fenced it since). A failed task's producer is closed, never pooled;
 *       without a prepared record (the first epoch, a checkpoint of an older version, a
 *       savepoint's seeded {@code -1-<partition>.rest}) the first attempt records the end
 *       offsets itself. Every open fetches the output topics' metadata (from the producer's
 *       cache once it has it), so that no row's send waits for it.
 * </ul>
 *
 * <p>Contract: rows with the same id in one epoch are the same output (the fraud path emits
 * at most one alert per transaction); the ids of an epoch's committed output fit in memory.
 * A failed commit fails the task (and Spark restarts it or the query), never drops a row.
 */
public final class ExactlyOnceKafkaWriter extends ForeachWriter<Row> {
  private static final long serialVersionUID = 1L;
  /** The header carrying a row's id (what a replay compares). */
  public static final String ID_HEADER = "headrace.id";
  /** The header naming the task partition that wrote a row (a replay routes rows alike). */
  public static final String PARTITION_HEADER = "headrace.task";
  private static final AtomicLong WRITTEN = new AtomicLong();
  private static final AtomicLong SKIPPED = new AtomicLong();
  private static final Logger LOG = LoggerFactory.getLogger(ExactlyOnceKafkaWriter.class);
  /** The suffix of the record a task prepares at its close for the next epoch's task. */
  static final String NEXT = ".next";
  /** How long into an epoch a task captures the end offsets for the next epoch's record. */
  private static final long CAPTURE_DELAY_MS = 1_000;

  /**
   * {rows written, rows skipped as already committed} by this JVM's tasks since it started
   * (in local mode the whole query's; tests and benchmarks read it).
   */
  public static long[] counters() {
    return new long[] {WRITTEN.get(), SKIPPED.get()};
  }

  private final String bootstrap;
  private final String[] topics;
  private final String stateDir;
  private final long commitIntervalMs;
  private final int maxRecords;
  private final Map<String, String> producerConfig;

  private transient KafkaProducer<byte[], byte[]> producer;
  private transient Set<String> committed;
  private transient ScheduledExecutorService flusher;
  private transient Object lock;
  private transient boolean inTxn;
  private transient long txnStartNs;
  private transient long lastSendNs;
  private transient int pending;
  private transient volatile RuntimeException failure;
  private transient byte[] partitionHeader;
  private transient long partitionId;
  private transient long epochId;
  private transient String producerKey;
  private transient long openedNs;
  private transient boolean sentOne;
  /** The offsets of this epoch's record (a lower bound for the next epoch's output too). */
  private transient Map<TopicPartition, Long> recordFrom;
  /** The end offsets captured during this epoch, for the next epoch's record; may be null. */
  private transient volatile Map<TopicPartition, Long> nextFrom;

  /**
   * {@code topics}: the first is the default destination; replays are checked against all.
   * {@code producerConfig}: extra producer settings (e.g. timeouts); may be empty.
   */
  public ExactlyOnceKafkaWriter(String bootstrap, String[] topics, String stateDir,
      long commitIntervalMs, int maxRecords, Map<String, String> producerConfig) {
    if (topics.length == 0) {
      throw new IllegalArgumentException("at least one output topic");
    }
    this.bootstrap = bootstrap;
    this.topics = topics.clone();
    this.stateDir = stateDir;
    this.commitIntervalMs = Math.max(1, commitIntervalMs);
    this.maxRecords = Math.max(1, maxRecords);
    this.producerConfig = new HashMap<>(producerConfig);
  }

  @Override
  public boolean open(long partitionId, long epochId) {
    TaskContext ctx = TaskContext.get();
    String queryId = ctx == null ? null : ctx.getLocalProperty("sql.streaming.queryId");
    if (queryId == null) {
      throw new IllegalStateException("the exactly-once sink runs in a streaming query only");
    }
    String transactionalId = "headrace-rt-" + queryId + "-" + partitionId;
    producerKey = bootstrap + "|" + transactionalId + "|" + producerConfig;
    lock = new Object();
    this.partitionId = partitionId;
    this.epochId = epochId;
    partitionHeader = Long.toString(partitionId).getBytes(StandardCharsets.UTF_8);
    long t0 = System.nanoTime();
    try {
      Path dir = new Path(stateDir);
      FileSystem fs = EpochRecords.fileSystem(dir);
      Path file = new Path(dir, epochId + "-" + partitionId);
      // the record the previous epoch's task prepared at its close, taken as this epoch's:
      // no end-offsets round trip and no write at the boundary (the rename marks the first
      // attempt, as the record's existence does)
      List<String> prepared = null;
      Path next = new Path(dir, epochId + "-" + partitionId + NEXT);
      if (!fs.exists(file) && fs.exists(next) && fs.rename(next, file)) {
        prepared = EpochRecords.readLines(fs, file);
      }
      producer = reusableProducer(prepared);
      boolean reused = producer != null;
      if (producer == null) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        // a crashed task's open transaction holds read_committed readers back until it is
        // aborted: by the task's next incarnation, or by the coordinator after this long
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "20000");
        p.putAll(producerConfig);
        producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
        producer.initTransactions();
      }
      // The output topics' metadata now, not in the first row's send: a producer fetches a
      // topic's partitions on its first record to it, and the first alerts of a run (or of
      // an epoch after a producer sat idle) waited for that round trip. Cached: no request.
      for (String t : topics) {
        producer.partitionsFor(t);
      }
      long producerNs = System.nanoTime() - t0;
      committed = prepared != null ? recordIds(prepared)
          : alreadyCommitted(fs, dir, partitionId, epochId);
      LOG.info("epoch {} partition {}: open in {} ms (producer {} {} ms, record {} {} ms)",
          epochId, partitionId, (System.nanoTime() - t0) / 1_000_000,
          reused ? "reused" : "new", producerNs / 1_000_000,
          prepared != null ? "prepared" : "written", (System.nanoTime() - t0 - producerNs)
              / 1_000_000);
    } catch (IOException e) {
      throw new IllegalStateException("the sink's epoch record in " + stateDir + ": " + e, e);
    }
    ScheduledThreadPoolExecutor pool = new ScheduledThreadPoolExecutor(2, r -> {
      Thread t = new Thread(r, "headrace-eos-flusher-" + partitionId);
      t.setDaemon(true);
      return t;
    });
    // close does not wait for a capture that has not started
    pool.setExecuteExistingDelayedTasksAfterShutdownPolicy(false);
    flusher = pool;
    flusher.scheduleWithFixedDelay(this::flushIfDue, tickMs(), tickMs(), TimeUnit.MILLISECONDS);
    flusher.schedule(this::prepareNext, CAPTURE_DELAY_MS, TimeUnit.MILLISECONDS);
    openedNs = System.nanoTime();
    sentOne = false;
    return true;
  }

  @Override
  public void process(Row row) {
    RuntimeException f = failure;
    if (f != null) {
      throw f;
    }
    String id = row.getAs("id");
    if (id != null && committed.remove(id)) {
      SKIPPED.incrementAndGet();
      return;
    }
    StructType schema = row.schema();
    String topic = topics[0];
    if (hasField(schema, "topic") && row.getAs("topic") != null) {
      topic = row.getAs("topic");
    }
    ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(topic, null,
        bytes(row.getAs("key")), bytes(row.getAs("value")));
    if (id != null) {
      rec.headers().add(ID_HEADER, id.getBytes(StandardCharsets.UTF_8));
    }
    rec.headers().add(PARTITION_HEADER, partitionHeader);
    if (hasField(schema, "headers") && row.getAs("headers") != null) {
      scala.collection.Map<String, String> hs = row.getAs("headers");
      scala.collection.Iterator<scala.Tuple2<String, String>> it = hs.iterator();
      while (it.hasNext()) {
        scala.Tuple2<String, String> h = it.next();
        if (h._2() != null) {
          rec.headers().add(h._1(), h._2().getBytes(StandardCharsets.UTF_8));
        }
      }
    }
    synchronized (lock) {
      if (!inTxn) {
        producer.beginTransaction();
        inTxn = true;
        txnStartNs = System.nanoTime();
      }
      long s0 = System.nanoTime();
      lastSendNs = s0;
      producer.send(rec);
      if (!sentOne) {
        sentOne = true;
        LOG.info("epoch {} partition {}: first send {} ms after open, took {} ms", epochId,
            partitionId, (s0 - openedNs) / 1_000_000, (System.nanoTime() - s0) / 1_000_000);
      }
      pending++;
      WRITTEN.incrementAndGet();
      if (pending >= maxRecords) {
        commitLocked();
      }
    }
  }

  @Override
  public void close(Throwable errorOrNull) {
    LOG.info("epoch {} partition {}: close {} ms after open ({})", epochId, partitionId,
        (System.nanoTime() - openedNs) / 1_000_000, errorOrNull == null ? "ok" : errorOrNull);
    if (flusher != null) {
      // not shutdownNow: interrupting a commit in flight fails it
      flusher.shutdown();
      try {
        flusher.awaitTermination(60, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    if (producer == null) {
      return;
    }
    boolean reusable = false;
    try {
      synchronized (lock) {
        if (errorOrNull == null && failure == null) {
          if (inTxn) {
            commitLocked();
          }
          reusable = true;
        } else if (inTxn) {
          try {
            producer.abortTransaction();
          } catch (RuntimeException ignored) {
            // the next incarnation's initTransactions aborts it anyway
          }
          inTxn = false;
        }
      }
    } finally {
      // only a producer whose last transaction committed serves the next epoch
      if (reusable) {
        ClientPool.giveBack(producerKey, producer);
      } else {
        ClientPool.close(producer);
      }
      producer = null;
    }
    if (errorOrNull == null && failure != null) {
      throw failure;
    }
    if (errorOrNull == null) {
      try {
        writeNext(partitionId, epochId);
      } catch (IOException e) {
        throw new IllegalStateException("the sink's epoch record in " + stateDir + ": " + e, e);
      }
    }
  }

  /** How often the flusher looks, and how long a transaction may go without a row. */
  private long tickMs() {
    return Math.max(1, commitIntervalMs / 4);
  }

  private void flushIfDue() {
    try {
      synchronized (lock) {
        long now = System.nanoTime();
        if (inTxn && failure == null
            && (now - txnStartNs >= commitIntervalMs * 1_000_000L
                || now - lastSendNs >= tickMs() * 1_000_000L)) {
          commitLocked();
        }
      }
    } catch (RuntimeException e) {
      failure = e;
    }
  }

  private void commitLocked() {
    producer.commitTransaction();
    inTxn = false;
    pending = 0;
  }

  /**
   * The producer this partition's task of the previous epoch gave back in this JVM, when it is
   * still the latest incarnation of the transactional id: the record that task prepared at its
   * successful close ({@code prepared}, taken by this epoch's first attempt) names this JVM, so
   * no task elsewhere fenced it since (a retry starts a new incarnation, whose
   * {@code initTransactions} aborts what the failed attempt left open). Null otherwise (a
   * pooled producer that does not qualify is closed).
   */
  @SuppressWarnings("unchecked")
  private KafkaProducer<byte[], byte[]> reusableProducer(List<String> prepared) {
    KafkaProducer<byte[], byte[]> pooled =
        (KafkaProducer<byte[], byte[]>) ClientPool.take(producerKey);
    if (pooled == null) {
      return null;
    }
    if (prepared != null && prepared.contains("owner\t" + ClientPool.JVM_TOKEN)) {
      return pooled;
    }
    ClientPool.close(pooled);
    return null;
  }

  /** The ids of an epoch record's lines; its offsets become {@link #recordFrom}. */
  private Set<String> recordIds(List<String> lines) {
    Set<String> ids = new HashSet<>();
    Map<TopicPartition, Long> from = new HashMap<>();
    for (String line : lines) {
      String[] f = line.split("\t", 2);
      if (f[0].equals("id") && f.length == 2) {
        ids.add(f[1]);
      } else if (f[0].equals("offset")) {
        String[] o = line.split("\t");
        from.put(new TopicPartition(o[1], Integer.parseInt(o[2])), Long.parseLong(o[3]));
      }
    }
    recordFrom = from;
    return ids;
  }

  /**
   * The ids to skip in this epoch: on its first attempt, what the previous epoch of this
   * partition left unseen of its own skip set; on a retry, that plus what earlier attempts
   * of this epoch committed (read back from the output). Writes the epoch's record first.
   */
  private Set<String> alreadyCommitted(FileSystem fs, Path dir, long partitionId, long epochId)
      throws IOException {
    Path file = new Path(dir, epochId + "-" + partitionId);
    if (fs.exists(file)) {
      Set<String> ids = recordIds(EpochRecords.readLines(fs, file));
      ids.addAll(scan(recordFrom, Long.toString(partitionId)));
      return ids;
    }
    Map<TopicPartition, Long> ends = endOffsets();
    Set<String> ids =
        EpochRecords.readIds(fs, new Path(dir, (epochId - 1) + "-" + partitionId + ".rest"));
    EpochRecords.writeAtomically(fs, file, EpochRecords.record(ends, ids));
    recordFrom = ends;
    return ids;
  }

  /**
   * In the background, a second into the epoch (off the boundary): the output's end offsets
   * for the record the next epoch starts from, and the removal of records older than the
   * previous epoch's. A failure here costs nothing but a longer read on a retry (the record
   * then carries this epoch's offsets, a lower bound still).
   */
  private void prepareNext() {
    try {
      nextFrom = endOffsets();
      Path dir = new Path(stateDir);
      FileSystem fs = EpochRecords.fileSystem(dir);
      for (FileStatus st : fs.listStatus(dir)) {
        String name = st.getPath().getName();
        int dash = name.indexOf('-');
        if (!name.startsWith(".") && dash > 0) {
          try {
            if (Long.parseLong(name.substring(0, dash)) < epochId - 1) {
              fs.delete(st.getPath(), false);
            }
          } catch (NumberFormatException ignored) {
            // not one of ours
          }
        }
      }
    } catch (IOException | RuntimeException e) {
      LOG.warn("epoch {} partition {}: preparing the next epoch's record: {}", epochId,
          partitionId, e.toString());
    }
  }

  /**
   * At a successful close: the next epoch's record for this partition, prepared
   * ({@code <epoch + 1>-<partition>.next}, which that epoch's first attempt renames to its own
   * record instead of asking the broker for end offsets and writing one at the boundary).
   * Its offsets were taken during this epoch, after this epoch's record (every output row of
   * the next epoch lies after them; a retry of it reads a little more); its ids are the skip
   * set's ids this epoch did not meet (a replay can be cut short by the checkpoint: the
   * retry's batch may end before the input the crashed attempt had reached, so the rest comes
   * in the following epochs); its owner is this JVM, whose pool now holds the producer.
   */
  private void writeNext(long partitionId, long epochId) throws IOException {
    Path dir = new Path(stateDir);
    FileSystem fs = EpochRecords.fileSystem(dir);
    Map<TopicPartition, Long> from = nextFrom != null ? nextFrom : recordFrom;
    EpochRecords.writeAtomically(fs, new Path(dir, (epochId + 1) + "-" + partitionId + NEXT),
        EpochRecords.record(from, committed));
  }

  /**
   * The ids of the records task {@code partition} committed in {@code from}'s partitions
   * since its offsets.
   */
  private Set<String> scan(Map<TopicPartition, Long> from, String partition) {
    Map<TopicPartition, Long> until = endOffsets();
    try (KafkaConsumer<byte[], byte[]> consumer = consumer("read_committed")) {
      return EpochRecords.scan(consumer, from, until, partition);
    }
  }

  /**
   * The output topics' end offsets (read_uncommitted: open transactions included), through a
   * consumer kept in this JVM across epochs (building one per epoch and task stalled every
   * checkpoint boundary).
   */
  @SuppressWarnings("unchecked")
  private Map<TopicPartition, Long> endOffsets() {
    String key = "end-offsets|" + bootstrap;
    KafkaConsumer<byte[], byte[]> consumer = (KafkaConsumer<byte[], byte[]>) ClientPool.take(key);
    if (consumer == null) {
      consumer = consumer("read_uncommitted");
    }
    boolean ok = false;
    try {
      List<TopicPartition> parts = new ArrayList<>();
      for (String t : topics) {
        List<PartitionInfo> infos = consumer.partitionsFor(t, Duration.ofSeconds(30));
        if (infos == null || infos.isEmpty()) {
          throw new IllegalStateException("output topic " + t + " does not exist");
        }
        for (PartitionInfo pi : infos) {
          parts.add(new TopicPartition(t, pi.partition()));
        }
      }
      Map<TopicPartition, Long> ends = consumer.endOffsets(parts, Duration.ofSeconds(30));
      ok = true;
      return ends;
    } finally {
      if (ok) {
        ClientPool.giveBack(key, consumer);
      } else {
        ClientPool.close(consumer);
      }
    }
  }

  private KafkaConsumer<byte[], byte[]> consumer(String isolation) {
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
  }

  private static boolean hasField(StructType schema, String name) {
    for (String f : schema.fieldNames()) {
      if (f.equals(name)) {
        return true;
      }
    }
    return false;
  }

  private static byte[] bytes(Object v) {
    if (v == null) {
      return null;
    }
    if (v instanceof byte[] b) {
      return b;
    }
    return v.toString().getBytes(StandardCharsets.UTF_8);
  }
}
