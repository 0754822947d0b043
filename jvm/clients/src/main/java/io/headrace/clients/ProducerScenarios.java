package io.headrace.clients;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.internals.RecordHeaders;

/** The idempotent producer (acks=all) in every codec, with headers, timestamps and keys. */
final class ProducerScenarios {
    static final List<String> CODECS = List.of("none", "gzip", "snappy", "lz4", "zstd");
    static final int PARTITIONS = 3;
    static final int RECORDS = 30;

    private ProducerScenarios() {}

    /**
     * Record {@code i} of a codec's topic (tests/compat/test_java_client.py mirrors this): key
     * {@code key-(i%7)}, except every tenth record (i%10==9) which has a null key and the explicit
     * partition i%3; value {@code value-CODEC-i} repeated 4 times; timestamp BASE+i*1000; headers:
     * i%3==0: trace=t{i}, trace=dup; i%3==1: nullable=null; i==2: a non-ASCII name and value.
     */
    static ProducerRecord<String, String> record(String topic, String codec, int i) {
        boolean keyless = i % 10 == 9;
        RecordHeaders headers = new RecordHeaders();
        if (i % 3 == 0) {
            headers.add("trace", ("t" + i).getBytes(StandardCharsets.UTF_8));
            headers.add("trace", "dup".getBytes(StandardCharsets.UTF_8));
        } else if (i % 3 == 1) {
            headers.add("nullable", null);
        } else if (i == 2) {
            headers.add("\u00fcn\u00efcode", "\u2713".getBytes(StandardCharsets.UTF_8));
        }
        String value = ("value-" + codec + "-" + i).repeat(4);
        return new ProducerRecord<>(topic, keyless ? Integer.valueOf(i % PARTITIONS) : null,
                Clients.BASE_TIMESTAMP + i * 1000L, keyless ? null : "key-" + (i % 7), value, headers);
    }

    /** For each codec: topic TOPIC-CODEC (3 partitions), RECORDS records sent with one
     * producer, every delivery callback's (partition, offset, timestamp), then every record read
     * back with a plain assigned consumer. */
    static Map<String, Object> produce(Args args) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = Clients.admin(args.bootstrap());
             KafkaConsumer<String, String> consumer = Clients.consumer(args.bootstrap())) {
            for (String codec : CODECS) {
                String topic = args.topic() + "-" + codec;
                Clients.createTopic(admin, topic, PARTITIONS);
                List<Object> delivered = new ArrayList<>();
                try (KafkaProducer<String, String> producer = Clients.producer(args.bootstrap(),
                        "compression.type", codec)) {
                    List<Future<RecordMetadata>> futures = new ArrayList<>();
                    List<Object> callbacks = new ArrayList<>();
                    for (int i = 0; i < RECORDS; i++) {
                        int index = i;
                        callbacks.add(null);
                        futures.add(producer.send(record(topic, codec, i), (md, e) -> {
                            synchronized (callbacks) {
                                callbacks.set(index, e != null ? Clients.errorName(e)
                                        : List.of(md.partition(), md.offset(), md.timestamp()));
                            }
                        }));
                    }
                    producer.flush();
                    for (Future<RecordMetadata> f : futures) f.get(); // after get(), its callback has run
                    synchronized (callbacks) {
                        delivered.addAll(callbacks);
                    }
                }
                out.put(codec, Json.obj("topic", topic, "delivered", delivered,
                        "consumed", Clients.readAll(consumer, Clients.partitions(topic, PARTITIONS))));
            }
        }
        return out;
    }
}
