package io.headrace.clients;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;

/** The Admin client (kafka-clients 4.x API): topics, configs, offsets, records, groups, cluster. */
final class AdminScenarios {
    static final List<Long> STAMPS = List.of(1000L, 5000L, 2000L, 3000L);

    private AdminScenarios() {}

    /** The value of a future, or the simple name of the exception it failed with. */
    static Object outcome(KafkaFuture<?> future) {
        try {
            Object v = future.get();
            return v == null ? "ok" : v;
        } catch (ExecutionException | InterruptedException e) {
            System.err.println("expected or not, the future failed: " + e.getCause());
            return Clients.errorName(e);
        }
    }

    /**
     * Topics TOPIC-a (3 partitions, retention.ms=3600000, cleanup.policy=delete) and TOPIC-b (1
     * partition, 4 records with timestamps STAMPS); group TOPIC-group. Every step is one key
     * of the result, in order.
     */
    static Map<String, Object> admin(Args args) throws Exception {
        String a = args.topic() + "-a";
        String b = args.topic() + "-b";
        String group = args.topic() + "-group";
        Map<String, Object> out = Json.obj();
        try (Admin admin = Clients.admin(args.bootstrap())) {
            DescribeClusterResult cluster = admin.describeCluster();
            int nodeId = cluster.controller().get().id();
            List<Object> nodes = new ArrayList<>();
            for (Node n : cluster.nodes().get()) nodes.add(List.of(n.id(), n.host(), n.port()));
            out.put("cluster", Json.obj("cluster_id_set", cluster.clusterId().get() != null,
                    "controller", nodeId, "nodes", nodes));

            NewTopic newA = new NewTopic(a, 3, (short) 1).configs(
                    Map.of("retention.ms", "3600000", "cleanup.policy", "delete"));
            CreateTopicsResult created = admin.createTopics(List.of(newA, new NewTopic(b, 1, (short) 1)));
            created.all().get();
            Uuid idA = created.topicId(a).get();
            out.put("create", Json.obj("topic_id_set", idA != null && !Uuid.ZERO_UUID.equals(idA),
                    "partitions", created.numPartitions(a).get(), "replication_factor", created.replicationFactor(a).get()));
            out.put("create_again", outcome(admin.createTopics(List.of(new NewTopic(a, 3, (short) 1))).all()));
            out.put("create_rf2", outcome(admin.createTopics(List.of(new NewTopic(args.topic() + "-rf2", 1, (short) 2))).all()));

            TopicDescription byName = admin.describeTopics(List.of(a)).allTopicNames().get().get(a);
            out.put("describe", describe(byName));
            out.put("describe_id_matches", idA.equals(byName.topicId()));
            Object byId = outcome(admin.describeTopics(TopicCollection.ofTopicIds(List.of(idA))).allTopicIds());
            out.put("describe_by_id", byId instanceof Map<?, ?> m ? describe((TopicDescription) m.get(idA)) : byId);
            out.put("list_topics_has_a", admin.listTopics().names().get().contains(a));

            ConfigResource resA = new ConfigResource(ConfigResource.Type.TOPIC, a);
            Map<String, Object> initial = configs(admin, resA);
            out.put("configs", initial);
            ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(nodeId));
            ConfigEntry maxBytes = admin.describeConfigs(List.of(broker)).all().get().get(broker).get("message.max.bytes");
            out.put("broker_config", maxBytes == null ? null : Json.obj("source", maxBytes.source(),
                    "read_only", maxBytes.isReadOnly(), "value_set", maxBytes.value() != null));

            alter(admin, resA, new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND));
            Map<String, Object> setAppend = configsChangedFrom(admin, resA, initial);
            out.put("configs_after_set_append", setAppend);
            alter(admin, resA, new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE),
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.SUBTRACT));
            out.put("configs_after_delete_subtract", configsChangedFrom(admin, resA, setAppend));
            out.put("alter_unknown_config", outcome(admin.incrementalAlterConfigs(Map.of(resA, List.of(
                    new AlterConfigOp(new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET)))).all()));

            out.put("create_partitions", outcome(admin.createPartitions(Map.of(a, NewPartitions.increaseTo(5))).all()));
            out.put("partitions_after", admin.describeTopics(List.of(a)).allTopicNames().get().get(a).partitions().size());
            out.put("shrink_partitions", outcome(admin.createPartitions(Map.of(a, NewPartitions.increaseTo(2))).all()));

            TopicPartition b0 = new TopicPartition(b, 0);
            try (KafkaProducer<String, String> p = Clients.producer(args.bootstrap())) {
                for (int i = 0; i < STAMPS.size(); i++) p.send(new ProducerRecord<>(b, 0, STAMPS.get(i), null, "r" + i));
            }
            Map<String, OffsetSpec> specs = new java.util.LinkedHashMap<>();
            specs.put("earliest", OffsetSpec.earliest());
            specs.put("latest", OffsetSpec.latest());
            specs.put("max_timestamp", OffsetSpec.maxTimestamp());
            specs.put("for_timestamp_2500", OffsetSpec.forTimestamp(2500));
            specs.put("for_timestamp_5000", OffsetSpec.forTimestamp(5000));
            specs.put("for_timestamp_6000", OffsetSpec.forTimestamp(6000));
            out.put("list_offsets", listOffsets(admin, b0, specs));

            out.put("delete_records", admin.deleteRecords(Map.of(b0, RecordsToDelete.beforeOffset(2)))
                    .lowWatermarks().get(b0).get().lowWatermark());
            out.put("list_offsets_after_delete", listOffsets(admin, b0, Map.of("earliest", OffsetSpec.earliest())));

            Map<Integer, Map<String, LogDirDescription>> dirs = admin.describeLogDirs(List.of(nodeId)).allDescriptions().get();
            List<Object> replicas = new ArrayList<>();
            for (LogDirDescription d : dirs.get(nodeId).values()) {
                ReplicaInfo info = d.replicaInfos().get(b0);
                if (info != null) replicas.add(Json.obj("size_positive", info.size() > 0, "offset_lag", info.offsetLag(),
                        "is_future", info.isFuture(), "error", d.error() == null ? null : d.error().getClass().getSimpleName()));
            }
            out.put("log_dirs", Json.obj("dirs", dirs.get(nodeId).size(), "replicas_of_b0", replicas));

            groups(admin, args.bootstrap(), b, group, out);

            out.put("delete_topics", outcome(admin.deleteTopics(List.of(a, b)).all()));
            Clients.await("deleted topics gone from listTopics", () -> {
                try {
                    Set<String> names = admin.listTopics().names().get();
                    return !names.contains(a) && !names.contains(b);
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            out.put("describe_deleted", outcome(admin.describeTopics(List.of(a)).allTopicNames()));
            out.put("describe_deleted_by_id", outcome(admin.describeTopics(TopicCollection.ofTopicIds(List.of(idA))).allTopicIds()));
            out.put("delete_again", outcome(admin.deleteTopics(List.of(a)).all()));
        }
        return out;
    }

    /** A classic consumer group's life: list, describe, delete (refused while it has a
     * member), its offsets, delete once empty, then list and describe again. */
    private static void groups(Admin admin, String bootstrap, String topic, String group,
                               Map<String, Object> out) throws Exception {
        try (KafkaConsumer<String, String> c = Clients.consumer(bootstrap, "group.id", group)) {
            c.subscribe(List.of(topic));
            ConsumerScenarios.pollUntil(c, 2);
            c.commitSync();
            out.put("groups_listed_active", listGroups(admin, group));
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            List<Object> members = new ArrayList<>();
            for (MemberDescription m : d.members()) {
                Set<String> parts = new TreeSet<>();
                for (TopicPartition tp : m.assignment().topicPartitions()) parts.add(tp.toString());
                members.add(Json.obj("client_id_set", !m.clientId().isEmpty(), "assignment", parts));
            }
            out.put("group_described", Json.obj("state", d.groupState(), "type", d.type(),
                    "assignor", d.partitionAssignor(), "simple", d.isSimpleConsumerGroup(), "members", members,
                    "coordinator", d.coordinator().id()));
            out.put("delete_active_group", outcome(admin.deleteConsumerGroups(List.of(group)).all()));
        }
        out.put("groups_listed_empty", listGroups(admin, group));
        out.put("group_offsets", ConsumerScenarios.describe(
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()));
        out.put("delete_group", outcome(admin.deleteConsumerGroups(List.of(group)).all()));
        out.put("groups_listed_deleted", listGroups(admin, group));
        Object after = outcome(admin.describeConsumerGroups(List.of(group)).all());
        out.put("group_described_deleted", after instanceof Map<?, ?> m
                ? String.valueOf(((ConsumerGroupDescription) m.get(group)).groupState()) : after);
    }

    private static List<Object> listGroups(Admin admin, String group) throws Exception {
        Collection<GroupListing> all = admin.listGroups(ListGroupsOptions.forConsumerGroups()).all().get();
        List<Object> out = new ArrayList<>();
        for (GroupListing g : all) {
            if (g.groupId().equals(group)) out.add(Json.obj("type", g.type(), "state", g.groupState(),
                    "protocol", g.protocol()));
        }
        return out;
    }

    private static Map<String, Object> listOffsets(Admin admin, TopicPartition tp, Map<String, OffsetSpec> specs) throws Exception {
        Map<String, Object> out = Json.obj();
        for (Map.Entry<String, OffsetSpec> e : specs.entrySet()) {
            ListOffsetsResultInfo info = admin.listOffsets(Map.of(tp, e.getValue())).partitionResult(tp).get();
            out.put(e.getKey(), List.of(info.offset(), info.timestamp()));
        }
        return out;
    }

    private static void alter(Admin admin, ConfigResource res, AlterConfigOp... ops) throws Exception {
        admin.incrementalAlterConfigs(Map.of(res, List.of(ops))).all().get();
    }

    private static Map<String, Object> configs(Admin admin, ConfigResource res) throws Exception {
        Config config = admin.describeConfigs(List.of(res)).all().get().get(res);
        Map<String, Object> out = new TreeMap<>();
        for (String name : List.of("retention.ms", "cleanup.policy", "max.message.bytes")) {
            ConfigEntry e = config.get(name);
            out.put(name, e == null ? null : List.of(e.value(), e.source().name()));
        }
        return out;
    }

    /**
     * The topic's configs once they differ from {@code before} (or as they are after 15 s).
     * Apache Kafka (KRaft) answers incrementalAlterConfigs once the controller committed the
     * change, and each broker applies it to what describeConfigs reads a moment later, so a
     * describe straight after the alter may still show the old values; headrace's first
     * answer is already the new one.
     */
    private static Map<String, Object> configsChangedFrom(Admin admin, ConfigResource res,
            Map<String, Object> before) throws Exception {
        long deadline = System.nanoTime() + 15_000_000_000L;
        Map<String, Object> now = configs(admin, res);
        while (now.equals(before) && System.nanoTime() < deadline) {
            Thread.sleep(50);
            now = configs(admin, res);
        }
        return now;
    }

    private static Map<String, Object> describe(TopicDescription d) {
        List<Object> parts = new ArrayList<>();
        for (TopicPartitionInfo p : d.partitions()) {
            List<Integer> replicas = new ArrayList<>();
            for (Node n : p.replicas()) replicas.add(n.id());
            List<Integer> isr = new ArrayList<>();
            for (Node n : p.isr()) isr.add(n.id());
            parts.add(Json.obj("partition", p.partition(), "leader", p.leader().id(), "replicas", replicas, "isr", isr));
        }
        return Json.obj("name", d.name(), "internal", d.isInternal(), "topic_id_set", d.topicId() != null
                && !Uuid.ZERO_UUID.equals(d.topicId()), "partitions", parts);
    }
}
