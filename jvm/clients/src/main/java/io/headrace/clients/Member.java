package io.headrace.clients;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;

/**
 * One group member polling in its own thread (a KafkaConsumer is single-threaded, so other
 * threads see only the snapshots published here). It commits synchronously after each poll
 * and when partitions are revoked, so no record is consumed twice across rebalances.
 */
final class Member implements Runnable, ConsumerRebalanceListener {
    private final KafkaConsumer<String, String> consumer;
    private final String topic;
    private final AtomicBoolean stop = new AtomicBoolean();
    private final Thread thread;
    private final List<Object> events = new ArrayList<>();
    private final List<Object> consumed = new ArrayList<>();
    private volatile Set<Integer> assignment = Set.of();
    /** The generation (KIP-848: member epoch) and member id of the last assignment. */
    private volatile int generation = -1;
    private volatile String memberId = "";
    private volatile Throwable failure;

    Member(String name, String topic, KafkaConsumer<String, String> consumer) {
        this.consumer = consumer;
        this.topic = topic;
        this.thread = new Thread(this, name);
    }

    Member start() {
        thread.start();
        return this;
    }

    @Override
    public void run() {
        try {
            consumer.subscribe(List.of(topic), this);
            while (!stop.get()) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(50))) {
                    synchronized (this) {
                        consumed.add(List.of(r.partition(), r.offset()));
                    }
                }
                try {
                    consumer.commitSync();
                } catch (RebalanceInProgressException e) {
                    // the next poll completes the rebalance; revoked partitions commit then
                }
            }
        } catch (Throwable t) {
            failure = t;
        } finally {
            consumer.close(Clients.scaled(10));
        }
    }

    @Override
    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
        if (!partitions.isEmpty()) consumer.commitSync();
        event("revoked", partitions);
        Set<Integer> now = new TreeSet<>(assignment);
        for (TopicPartition tp : partitions) now.remove(tp.partition());
        assignment = now;
    }

    @Override
    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
        event("assigned", partitions);
        generation = consumer.groupMetadata().generationId();
        memberId = consumer.groupMetadata().memberId();
        Set<Integer> now = new TreeSet<>();
        for (TopicPartition tp : consumer.assignment()) now.add(tp.partition());
        assignment = now;
    }

    @Override
    public void onPartitionsLost(Collection<TopicPartition> partitions) {
        event("lost", partitions);
    }

    private synchronized void event(String kind, Collection<TopicPartition> partitions) {
        if (partitions.isEmpty()) return; // cooperative rebalances report empty changes too
        Set<Integer> ids = new TreeSet<>();
        for (TopicPartition tp : partitions) ids.add(tp.partition());
        events.add(Json.obj(kind, ids));
    }

    Set<Integer> assignment() {
        check();
        return assignment;
    }

    int generation() {
        return generation;
    }

    synchronized int consumedCount() {
        check();
        return consumed.size();
    }

    /** Stop polling, leave (close) and wait for the thread. */
    void close() throws InterruptedException {
        stop.set(true);
        thread.join(30_000);
        check();
    }

    private void check() {
        if (failure != null) throw new IllegalStateException(thread.getName() + " failed", failure);
    }

    synchronized Map<String, Object> report() {
        return Json.obj("member_id", memberId, "generation", generation, "assignment", assignment,
                "events", new ArrayList<>(events), "consumed", new ArrayList<>(consumed));
    }
}
