package io.headrace.clients;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/** One consumer at a time: positions, seeks, offsetsForTimes, commits and resuming. */
final class ConsumerScenarios {
    private ConsumerScenarios() {}

    /** Topic TOPIC (2 partitions): p0 gets v0..v9 with timestamps BASE+i*1000 in one batch,
     * p1 gets w0..w4 (then TOPIC is closed for writes). */
    private static void fill(Admin admin, String bootstrap, String topic) throws Exception {
        Clients.createTopic(admin, topic, 2);
        try (KafkaProducer<String, String> p = Clients.producer(bootstrap, "linger.ms", 1000)) {
            for (int i = 0; i < 10; i++) p.send(new ProducerRecord<>(topic, 0, Clients.BASE_TIMESTAMP + i * 1000L, null, "v" + i));
            for (int i = 0; i < 5; i++) p.send(new ProducerRecord<>(topic, 1, null, "w" + i));
            p.flush();
        }
    }

    private static List<Object> offsetsAndValues(List<Map<String, Object>> records) {
        List<Object> out = new ArrayList<>();
        for (Map<String, Object> r : records) out.add(List.of(r.get("partition"), r.get("offset"), r.get("value")));
        return out;
    }

    /** beginning/endOffsets, seekToEnd, seek, seekToBeginning, offsetsForTimes on p0. */
    static Map<String, Object> positions(Args args) throws Exception {
        String topic = args.topic();
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        Map<String, Object> out = Json.obj();
        try (Admin admin = Clients.admin(args.bootstrap())) {
            fill(admin, args.bootstrap(), topic);
        }
        try (KafkaConsumer<String, String> c = Clients.consumer(args.bootstrap())) {
            List<TopicPartition> both = List.of(p0, p1);
            c.assign(both);
            out.put("beginning_offsets", List.of(c.beginningOffsets(both).get(p0), c.beginningOffsets(both).get(p1)));
            out.put("end_offsets", List.of(c.endOffsets(both).get(p0), c.endOffsets(both).get(p1)));
            c.seekToEnd(List.of(p0));
            out.put("position_after_seek_to_end", c.position(p0));
            c.seek(p0, 4);
            c.seek(p1, 3);
            out.put("after_seek", offsetsAndValues(Clients.readToEnd(c)));
            c.seekToBeginning(List.of(p0));
            out.put("position_after_seek_to_beginning", c.position(p0));
            c.assign(List.of(p0));
            c.seek(p0, 8);
            out.put("after_reassign_and_seek", offsetsAndValues(Clients.readToEnd(c)));

            Map<String, Object> times = new TreeMap<>();
            List<Long> queries = new ArrayList<>();
            for (int i = 0; i < 10; i++) queries.add(Clients.BASE_TIMESTAMP + i * 1000L);
            queries.add(Clients.BASE_TIMESTAMP - 1);        // before the first record
            queries.add(Clients.BASE_TIMESTAMP + 2500);     // between records 2 and 3
            queries.add(Clients.BASE_TIMESTAMP + 9001);     // after the last
            for (long ts : queries) {
                OffsetAndTimestamp found = c.offsetsForTimes(Map.of(p0, ts)).get(p0);
                times.put(String.valueOf(ts), found == null ? null : List.of(found.offset(), found.timestamp()));
            }
            out.put("offsets_for_times", times);
        }
        return out;
    }

    /**
     * Group TOPIC-group: consumer 1 subscribes, reads all 15 records, commitSync({p0: 3, "sync"}),
     * commitAsync({p1: 2, "async"}), then committed(); a second consumer resumes from there,
     * reads to the end and commitSync()s its positions; committed() again and the Admin view.
     */
    static Map<String, Object> commits(Args args) throws Exception {
        String topic = args.topic();
        String group = topic + "-group";
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        Map<String, Object> out = Json.obj();
        try (Admin admin = Clients.admin(args.bootstrap())) {
            fill(admin, args.bootstrap(), topic);
            try (KafkaConsumer<String, String> c = Clients.consumer(args.bootstrap(), "group.id", group)) {
                c.subscribe(List.of(topic));
                out.put("first_read", offsetsAndValues(pollUntil(c, 15)));
                c.commitSync(Map.of(p0, new OffsetAndMetadata(3, "sync")));
                AtomicReference<Object> callback = new AtomicReference<>();
                c.commitAsync(Map.of(p1, new OffsetAndMetadata(2, "async")), (offsets, e) ->
                        callback.set(e != null ? Clients.errorName(e) : describe(offsets)));
                Clients.await("the commitAsync callback", () -> {
                    c.poll(Duration.ofMillis(50));
                    return callback.get() != null;
                });
                out.put("commit_async_callback", callback.get());
                out.put("committed_1", describe(c.committed(Set.of(p0, p1))));
            }
            try (KafkaConsumer<String, String> c = Clients.consumer(args.bootstrap(), "group.id", group)) {
                c.subscribe(List.of(topic));
                out.put("resumed_read", offsetsAndValues(pollUntil(c, 10)));
                c.commitSync();
                out.put("committed_2", describe(c.committed(Set.of(p0, p1))));
            }
            Map<TopicPartition, OffsetAndMetadata> listed =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            out.put("admin_offsets", describe(listed));
        }
        return out;
    }

    static List<Map<String, Object>> pollUntil(KafkaConsumer<String, String> c, int count) {
        List<Map<String, Object>> seen = new ArrayList<>();
        // A group read waits for a join (and, on a loaded machine, for the previous
        // member's departure to settle): twice the usual allowance.
        try {
            Clients.await("consuming " + count + " records", () -> {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) seen.add(Clients.record(r));
                return seen.size() >= count;
            }, Clients.TIMEOUT.multipliedBy(2));
        } catch (IllegalStateException e) {
            throw new IllegalStateException(e.getMessage() + " (" + seen.size() + " seen; " + groupState(c) + ")", e);
        }
        return seen;
    }

    /** What a stuck group read knows of itself: generation, member, assignment, positions. */
    static String groupState(KafkaConsumer<String, String> c) {
        StringBuilder out = new StringBuilder();
        try {
            out.append("generation ").append(c.groupMetadata().generationId())
               .append(", member ").append(c.groupMetadata().memberId())
               .append(", assignment ").append(c.assignment());
            for (TopicPartition tp : c.assignment()) {
                out.append(", ").append(tp).append(" at ").append(c.position(tp, Clients.scaled(5)));
            }
            out.append(", committed ").append(c.committed(c.assignment(), Clients.scaled(5)));
        } catch (RuntimeException e) {
            out.append(" (then ").append(Clients.errorName(e)).append(")");
        }
        return out.toString();
    }

    /** {partition: [offset, metadata]} */
    static Map<String, Object> describe(Map<TopicPartition, OffsetAndMetadata> offsets) {
        Map<String, Object> out = new TreeMap<>();
        new HashMap<>(offsets).forEach((tp, om) ->
                out.put(String.valueOf(tp.partition()), om == null ? null : List.of(om.offset(), om.metadata())));
        return out;
    }
}
