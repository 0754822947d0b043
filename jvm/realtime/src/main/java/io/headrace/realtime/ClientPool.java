package io.headrace.realtime;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * Kafka clients kept in this JVM from one Real-Time Mode batch to the next.
 *
 * <p>Why: every batch (epoch) of a Real-Time Mode query starts new tasks, and the exactly-once
 * sink used to build a transactional producer ({@code initTransactions}: a coordinator lookup
 * and an InitProducerId round trip) and two consumers in each of them before the first row
 * could be written; the stream waited for it at every checkpoint boundary. A task of the next
 * epoch for the same partition now takes the producer its predecessor in this JVM gave back,
 * already initialised, and the end offsets come from a consumer kept here too.
 *
 * <p>Contract: {@link #take} hands a client to one user at a time (it leaves the pool until it
 * is given back); a client not taken again within {@link #IDLE_MS} is closed (a stopped query's
 * clients do not outlive it by more than that). {@link #JVM_TOKEN} names this JVM in the sink's
 * epoch records, so that a task can tell whether the pooled producer is the latest incarnation
 * of its transactional id (a task that ran elsewhere in between fenced it).
 */
final class ClientPool {
  /** How long a client given back waits to be taken again before it is closed. */
  static final long IDLE_MS = 60_000;
  /** This JVM's identity in the sink's epoch records. */
  static final String JVM_TOKEN = UUID.randomUUID().toString();

  private static final Map<String, ArrayDeque<Entry>> IDLE = new HashMap<>();
  private static ScheduledExecutorService reaper;

  private record Entry(AutoCloseable client, long since) {}

  private ClientPool() {}

  /** An idle client kept under {@code key}, or null; the caller owns it until it gives it back. */
  static synchronized AutoCloseable take(String key) {
    ArrayDeque<Entry> q = IDLE.get(key);
    Entry e = q == null ? null : q.pollLast();
    if (q != null && q.isEmpty()) {
      IDLE.remove(key);
    }
    return e == null ? null : e.client();
  }

  /** Keep {@code client} (in a state ready for its next user) under {@code key}. */
  static synchronized void giveBack(String key, AutoCloseable client) {
    IDLE.computeIfAbsent(key, k -> new ArrayDeque<>()).addLast(
        new Entry(client, System.nanoTime()));
    if (reaper == null) {
      reaper = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "headrace-client-pool-reaper");
        t.setDaemon(true);
        return t;
      });
      reaper.scheduleWithFixedDelay(ClientPool::closeIdle, 5, 5, TimeUnit.SECONDS);
    }
  }

  /** Close the clients idle for longer than {@link #IDLE_MS}. */
  static void closeIdle() {
    List<AutoCloseable> old = new ArrayList<>();
    long cutoff = System.nanoTime() - TimeUnit.MILLISECONDS.toNanos(IDLE_MS);
    synchronized (ClientPool.class) {
      for (Iterator<ArrayDeque<Entry>> it = IDLE.values().iterator(); it.hasNext(); ) {
        ArrayDeque<Entry> q = it.next();
        q.removeIf(e -> {
          if (e.since() < cutoff) {
            old.add(e.client());
            return true;
          }
          return false;
        });
        if (q.isEmpty()) {
          it.remove();
        }
      }
    }
    for (AutoCloseable c : old) {
      close(c);
    }
  }

  /** Close a client, quietly: it is being dropped (idle, fenced or after a failure). */
  static void close(AutoCloseable client) {
    try {
      if (client instanceof org.apache.kafka.clients.producer.Producer<?, ?> p) {
        p.close(Duration.ofSeconds(5));
      } else {
        client.close();
      }
    } catch (Exception ignored) {
      // dropped either way; a broker that is gone cannot be told
    }
  }
}
