package io.headrace.clients;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/** Transactional producers: commit, abort, the LSO of an open transaction, and
 * consume-transform-produce with {@code sendOffsetsToTransaction}. */
final class TransactionScenarios {
    private TransactionScenarios() {}

    /**
     * Topics TOPIC-out (1 partition) and TOPIC-in (2 partitions), group TOPIC-group.
     * <ol>
     * <li>producer TOPIC-txn-a: commit c0..c2; abort a0, a1 (flushed first, so they are in the
     *   log); then c3 is sent and flushed in an
     *   open transaction, the end offsets seen by read_committed and read_uncommitted consumers
     *   are noted, and it commits;</li>
     * <li>in-0..in-5 are written to TOPIC-in (partition i%2); a read_committed group consumer
     *   reads them; producer TOPIC-txn-b writes IN-i to TOPIC-out and sends offsets {0:3, 1:3}
     *   to the transaction, commits; then in-6, in-7 go the same way but the transaction
     *   (offsets {0:4, 1:4}) is flushed and aborted;</li>
     * <li>TOPIC-out is read with read_committed and read_uncommitted; the group's committed
     *   offsets are listed.</li>
     * </ol>
     */
    static Map<String, Object> transactions(Args args) throws Exception {
        String bootstrap = args.bootstrap();
        String out = args.topic() + "-out";
        String in = args.topic() + "-in";
        String group = args.topic() + "-group";
        TopicPartition outTp = new TopicPartition(out, 0);
        Map<String, Object> result = Json.obj();
        try (Admin admin = Clients.admin(bootstrap)) {
            Clients.createTopic(admin, out, 1);
            Clients.createTopic(admin, in, 2);

            try (KafkaProducer<String, String> txa = Clients.producer(bootstrap, "transactional.id", args.topic() + "-txn-a");
                 KafkaConsumer<String, String> committed = Clients.consumer(bootstrap, "isolation.level", "read_committed");
                 KafkaConsumer<String, String> uncommitted = Clients.consumer(bootstrap, "isolation.level", "read_uncommitted")) {
                txa.initTransactions();
                txa.beginTransaction();
                for (int i = 0; i < 3; i++) txa.send(new ProducerRecord<>(out, 0, null, "c" + i));
                txa.commitTransaction();
                txa.beginTransaction();
                for (int i = 0; i < 2; i++) txa.send(new ProducerRecord<>(out, 0, null, "a" + i));
                txa.flush(); // else abortTransaction drops the unsent records before they reach the log
                txa.abortTransaction();
                txa.beginTransaction();
                txa.send(new ProducerRecord<>(out, 0, null, "c3"));
                txa.flush();
                result.put("open_txn_end_offsets", Json.obj(
                        "read_committed", committed.endOffsets(List.of(outTp), Clients.TIMEOUT).get(outTp),
                        "read_uncommitted", uncommitted.endOffsets(List.of(outTp), Clients.TIMEOUT).get(outTp)));
                txa.commitTransaction();
            }

            try (KafkaProducer<String, String> plain = Clients.producer(bootstrap)) {
                for (int i = 0; i < 6; i++) plain.send(new ProducerRecord<>(in, i % 2, null, "in-" + i));
            }
            List<String> transformed = new ArrayList<>();
            try (KafkaConsumer<String, String> consumer = Clients.consumer(bootstrap, "group.id", group,
                        "isolation.level", "read_committed");
                 KafkaProducer<String, String> txb = Clients.producer(bootstrap, "transactional.id", args.topic() + "-txn-b")) {
                txb.initTransactions();
                consumer.subscribe(List.of(in));
                transformed.addAll(transform(consumer, txb, out, 6));
                txb.commitTransaction();
                try (KafkaProducer<String, String> plain = Clients.producer(bootstrap)) {
                    for (int i = 6; i < 8; i++) plain.send(new ProducerRecord<>(in, i % 2, null, "in-" + i));
                }
                transformed.addAll(transform(consumer, txb, out, 2));
                txb.flush();
                txb.abortTransaction();
            }
            result.put("transformed", transformed);

            Map<String, Object> groupOffsets = new java.util.TreeMap<>(); // {partition of TOPIC-in: offset}
            admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()
                    .forEach((tp, om) -> groupOffsets.put(String.valueOf(tp.partition()), om.offset()));
            result.put("group_committed", groupOffsets);
        }
        for (String isolation : List.of("read_committed", "read_uncommitted")) {
            try (KafkaConsumer<String, String> c = Clients.consumer(bootstrap, "isolation.level", isolation)) {
                List<Object> seen = new ArrayList<>();
                for (Map<String, Object> r : Clients.readAll(c, List.of(outTp))) seen.add(List.of(r.get("offset"), r.get("value")));
                result.put(isolation, Json.obj("records", seen, "position", c.position(outTp)));
            }
        }
        return result;
    }

    /** Poll {@code count} records, send each upper-cased to {@code out} in a new transaction and
     * add the consumer's next offsets to it; returns the values sent. Leaves the txn open. */
    private static List<String> transform(KafkaConsumer<String, String> consumer,
                                          KafkaProducer<String, String> producer, String out, int count) {
        List<ConsumerRecord<String, String>> polled = new ArrayList<>();
        Clients.await("consuming " + count + " input records", () -> {
            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) polled.add(r);
            return polled.size() >= count;
        });
        producer.beginTransaction();
        List<String> sent = new ArrayList<>();
        Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
        for (ConsumerRecord<String, String> r : polled) {
            String value = r.value().toUpperCase();
            producer.send(new ProducerRecord<>(out, 0, null, value));
            sent.add(value);
            next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
        }
        producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
        return sent;
    }
}
