package io.headrace.clients;

import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/** Two members of one group in one JVM (threads): assignors, static membership, KIP-848. */
final class GroupScenarios {
    static final int PARTITIONS = 4;

    private GroupScenarios() {}

    /** 5 records to each partition, values {@code p-i}. */
    private static void produceRound(String bootstrap, String topic, int round) {
        try (KafkaProducer<String, String> p = Clients.producer(bootstrap)) {
            for (int part = 0; part < PARTITIONS; part++) {
                for (int i = 0; i < 5; i++) p.send(new ProducerRecord<>(topic, part, null, round + "-" + part + "-" + i));
            }
        }
    }

    /** Both members own partitions, none twice, together all of them. */
    private static boolean balanced(Member a, Member b) {
        Set<Integer> union = new HashSet<>(a.assignment());
        union.addAll(b.assignment());
        return !a.assignment().isEmpty() && !b.assignment().isEmpty()
                && union.size() == PARTITIONS && a.assignment().size() + b.assignment().size() == PARTITIONS;
    }

    /**
     * For each assignor: topic TOPIC-ASSIGNOR (4 partitions) with 20 records; member a joins
     * alone and reads them; member b joins; once the two are balanced 20 more records are
     * written and read; both close. Reports each member's listener events and what it read.
     */
    static Map<String, Object> assignors(Args args) throws Exception {
        Map<String, Object> out = Json.obj();
        for (String assignor : List.of("range", "cooperative-sticky")) {
            String strategy = assignor.equals("range") ? "org.apache.kafka.clients.consumer.RangeAssignor"
                    : "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";
            String topic = args.topic() + "-" + assignor;
            try (Admin admin = Clients.admin(args.bootstrap())) {
                Clients.createTopic(admin, topic, PARTITIONS);
            }
            produceRound(args.bootstrap(), topic, 0);
            Object[] config = {"group.id", topic + "-group", "partition.assignment.strategy", strategy};
            Member a = new Member("a", topic, Clients.consumer(args.bootstrap(), config)).start();
            Clients.await("a owning every partition and reading 20 records",
                    () -> a.assignment().size() == PARTITIONS && a.consumedCount() == 20);
            Member b = new Member("b", topic, Clients.consumer(args.bootstrap(), config)).start();
            Clients.await("a and b balanced", () -> balanced(a, b));
            produceRound(args.bootstrap(), topic, 1);
            Clients.await("40 records read", () -> a.consumedCount() + b.consumedCount() == 40);
            Map<String, Object> ra = a.report();
            Map<String, Object> rb = b.report();
            a.close();
            b.close();
            out.put(assignor, Json.obj("a", ra, "b", rb));
        }
        return out;
    }

    /**
     * Topic TOPIC (4 partitions), range assignor, members with group.instance.id static-a and
     * static-b. Once balanced, b closes (a static member does not leave) and a new consumer with
     * instance id static-b joins: it gets b's partitions back without a rebalance of a.
     */
    static Map<String, Object> staticMembership(Args args) throws Exception {
        String topic = args.topic();
        try (Admin admin = Clients.admin(args.bootstrap())) {
            Clients.createTopic(admin, topic, PARTITIONS);
        }
        String group = topic + "-group";
        Member a = new Member("a", topic, Clients.consumer(args.bootstrap(), "group.id", group,
                "group.instance.id", "static-a")).start();
        Clients.await("a assigned", () -> a.assignment().size() == PARTITIONS);
        Member b = new Member("b", topic, Clients.consumer(args.bootstrap(), "group.id", group,
                "group.instance.id", "static-b")).start();
        Clients.await("a and b balanced", () -> balanced(a, b) && a.generation() > 0);
        Clients.await("a's generation known", () -> a.generation() == b.generation());
        Map<String, Object> before = a.report();
        Map<String, Object> b1 = b.report();
        b.close();
        Member b2 = new Member("b2", topic, Clients.consumer(args.bootstrap(), "group.id", group,
                "group.instance.id", "static-b")).start();
        Clients.await("b2 assigned", () -> !b2.assignment().isEmpty() && b2.generation() > 0);
        produceRound(args.bootstrap(), topic, 0);
        Clients.await("20 records read", () -> a.consumedCount() + b2.consumedCount() == 20);
        Map<String, Object> after = a.report();
        Map<String, Object> rb2 = b2.report();
        a.close();
        b2.close();
        return Json.obj("a_before", before, "a_after", after, "b", b1, "b2", rb2);
    }

    /**
     * KIP-848 (group.protocol=consumer): topic TOPIC (4 partitions) with 20 records; a joins and
     * reads them; b joins; balanced, 20 more are read; the group is described; b leaves (close)
     * and a owns every partition again; a closes; the committed offsets are listed.
     */
    static Map<String, Object> consumerProtocol(Args args) throws Exception {
        String topic = args.topic();
        String group = topic + "-group";
        Map<String, Object> out = Json.obj();
        try (Admin admin = Clients.admin(args.bootstrap())) {
            Clients.createTopic(admin, topic, PARTITIONS);
            produceRound(args.bootstrap(), topic, 0);
            Object[] config = {"group.id", group, "group.protocol", "consumer"};
            Member a = new Member("a", topic, Clients.consumer(args.bootstrap(), config)).start();
            Clients.await("a owning every partition and reading 20 records",
                    () -> a.assignment().size() == PARTITIONS && a.consumedCount() == 20);
            Member b = new Member("b", topic, Clients.consumer(args.bootstrap(), config)).start();
            Clients.await("a and b balanced", () -> balanced(a, b));
            produceRound(args.bootstrap(), topic, 1);
            Clients.await("40 records read", () -> a.consumedCount() + b.consumedCount() == 40);
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            Map<String, Object> members = new TreeMap<>();
            for (MemberDescription m : d.members()) {
                Set<Integer> parts = new java.util.TreeSet<>();
                for (TopicPartition tp : m.assignment().topicPartitions()) parts.add(tp.partition());
                members.put(m.consumerId(), parts);
            }
            out.put("described", Json.obj("type", d.type(), "state", d.groupState(), "members", members));
            out.put("b", b.report());
            b.close();
            Clients.await("a owning every partition again", () -> a.assignment().size() == PARTITIONS);
            out.put("a", a.report());
            a.close();
            out.put("committed", ConsumerScenarios.describe(
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()));
        }
        return out;
    }
}
