package io.headrace.clients;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** Client configurations and helpers shared by the scenarios (API present in 3.9 and 4.x). */
final class Clients {
    /** The tests' timeout knob (HEADRACE_TEST_TIMEOUT_SCALE, as headrace.testing.scaled):
     * every wait of a scenario is derived from it. */
    static final double SCALE = timeoutScale();
    static final Duration TIMEOUT = scaled(30);

    static double timeoutScale() {
        String raw = System.getenv("HEADRACE_TEST_TIMEOUT_SCALE");
        if (raw == null || raw.isBlank()) return 1.0;
        try {
            double scale = Double.parseDouble(raw.trim());
            return scale > 0 ? scale : 1.0;
        } catch (NumberFormatException e) {
            return 1.0;
        }
    }

    static Duration scaled(long seconds) {
        return Duration.ofMillis(Math.round(seconds * 1000 * SCALE));
    }
    static final long BASE_TIMESTAMP = 1_700_000_000_000L;

    private Clients() {}

    static Properties props(String bootstrap, Object... extra) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        for (int i = 0; i < extra.length; i += 2) p.put(extra[i], String.valueOf(extra[i + 1]));
        return p;
    }

    static KafkaProducer<String, String> producer(String bootstrap, Object... extra) {
        Properties p = props(bootstrap, "acks", "all", "enable.idempotence", "true", "linger.ms", 20);
        for (int i = 0; i < extra.length; i += 2) p.put(extra[i], String.valueOf(extra[i + 1]));
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    /** A consumer; with a {@code group.id} in {@code extra} it uses the classic protocol
     * unless {@code group.protocol} is given too. */
    static KafkaConsumer<String, String> consumer(String bootstrap, Object... extra) {
        Properties p = props(bootstrap, "enable.auto.commit", "false", "auto.offset.reset", "earliest");
        for (int i = 0; i < extra.length; i += 2) p.put(extra[i], String.valueOf(extra[i + 1]));
        if (p.containsKey("group.id")) {
            p.putIfAbsent("group.protocol", "classic");
            if ("classic".equals(p.get("group.protocol"))) {
                p.putIfAbsent("heartbeat.interval.ms", "200");
                p.putIfAbsent("session.timeout.ms", "10000");
            }
        }
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    static Admin admin(String bootstrap) {
        return Admin.create(props(bootstrap));
    }

    /**
     * A topic whose records are never deleted by time: the scenarios write them at
     * BASE_TIMESTAMP (2023), far older than the default retention.ms (7 days), so the
     * broker's next retention check would delete them in the middle of a scenario.
     */
    static void createTopic(Admin admin, String name, int partitions) throws Exception {
        NewTopic topic = new NewTopic(name, partitions, (short) 1).configs(Map.of("retention.ms", "-1"));
        admin.createTopics(List.of(topic)).all().get();
    }

    static Map<String, Object> record(ConsumerRecord<String, String> r) {
        List<Object> headers = new ArrayList<>();
        for (Header h : r.headers()) {
            headers.add(java.util.Arrays.asList(h.key(), h.value() == null ? null : new String(h.value(), StandardCharsets.UTF_8)));
        }
        return Json.obj("partition", r.partition(), "offset", r.offset(), "key", r.key(),
                "value", r.value(), "timestamp", r.timestamp(), "timestamp_type", r.timestampType().name,
                "headers", headers);
    }

    /** Reads the assigned partitions from their current positions up to their end offsets
     * (the LSO under read_committed); returns every record seen. Blocks up to TIMEOUT. */
    static List<Map<String, Object>> readToEnd(KafkaConsumer<String, String> consumer) {
        Collection<TopicPartition> parts = consumer.assignment();
        Map<TopicPartition, Long> end = new HashMap<>(consumer.endOffsets(parts, TIMEOUT));
        List<Map<String, Object>> seen = new ArrayList<>();
        await("reading to the end offsets " + end, () -> {
            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) seen.add(record(r));
            return parts.stream().allMatch(tp -> consumer.position(tp, TIMEOUT) >= end.get(tp));
        });
        return seen;
    }

    /** Assign {@code parts}, read them from the beginning to their end offsets. */
    static List<Map<String, Object>> readAll(KafkaConsumer<String, String> consumer, Collection<TopicPartition> parts) {
        consumer.assign(parts);
        consumer.seekToBeginning(parts);
        return readToEnd(consumer);
    }

    static void await(String what, BooleanSupplier done) {
        await(what, done, TIMEOUT);
    }

    static void await(String what, BooleanSupplier done, Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!done.getAsBoolean()) {
            if (System.nanoTime() > deadline) throw new IllegalStateException("timed out " + what);
            try {
                Thread.sleep(20);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException(e);
            }
        }
    }

    static List<TopicPartition> partitions(String topic, int count) {
        List<TopicPartition> out = new ArrayList<>();
        for (int p = 0; p < count; p++) out.add(new TopicPartition(topic, p));
        return out;
    }

    /** The error a failed admin/client future raised: its class's simple name. */
    static String errorName(Throwable t) {
        Throwable cause = t instanceof java.util.concurrent.ExecutionException && t.getCause() != null ? t.getCause() : t;
        return cause.getClass().getSimpleName();
    }
}
