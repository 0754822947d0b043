// A minimal Java 4.x consumer with group.protocol=consumer (KIP-848), run by
// tests/integration/test_java_consumer_group.py. Args: bootstrap group topic expected
// timeout-seconds (how long to wait for them; commitSync gets half of it).
// Consumes until it has seen `expected` records, commits synchronously, then prints
// "owned <partitions>" after each rebalance callback, one "record <partition> <offset>
// <value>" line per record, "assigned <partitions>" and "committed" on stdout, and closes
// (leaving the group).
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;

public class Kip848Consumer {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("group.protocol", "consumer");
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        props.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        int expected = Integer.parseInt(args[3]);
        // args[4]: how long to wait for them, in seconds (the tests' scaled timeout).
        long timeoutMs = (long) (Double.parseDouble(args[4]) * 1000);
        TreeSet<Integer> owned = new TreeSet<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(args[2]), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> ps) {
                    ps.forEach(tp -> owned.remove(tp.partition()));
                    System.out.println("owned " + owned);
                }
                public void onPartitionsAssigned(Collection<TopicPartition> ps) {
                    ps.forEach(tp -> owned.add(tp.partition()));
                    System.out.println("owned " + owned);
                }
            });
            int seen = 0;
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (seen < expected && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println("record " + r.partition() + " " + r.offset() + " " + r.value());
                    seen++;
                }
            }
            consumer.commitSync(Duration.ofMillis(timeoutMs / 2));
            System.out.println("assigned " + owned);
            System.out.println("committed");
        }
    }
}
