// The Java Admin client as a request loop (Shell): `java AdminShell <bootstrap>`, then one JSON
// request per line. Each op calls one Admin method and answers with the fields the Java client
// exposes, so tests check what a Java program (and Kafka's tools, thin layers over Admin) sees.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.TopicPartitionReplica;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.config.ConfigResource;

import java.util.*;

public class AdminShell extends Shell {
    private final Admin admin;

    public static void main(String[] args) throws Exception {
        new AdminShell(args[0]).serve();
    }

    AdminShell(String bootstrap) {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        admin = Admin.create(props);

        op("createTopics", r -> {
            List<NewTopic> topics = new ArrayList<>();
            for (JsonNode t : r.get("topics")) {
                NewTopic nt = new NewTopic(t.get("name").asText(),
                        Optional.ofNullable(t.has("partitions") ? t.get("partitions").asInt() : null),
                        Optional.ofNullable(t.has("replicationFactor") ? (short) t.get("replicationFactor").asInt() : null));
                Map<String, String> configs = new HashMap<>();
                t.path("configs").fields().forEachRemaining(e -> configs.put(e.getKey(), e.getValue().asText()));
                topics.add(nt.configs(configs));
            }
            CreateTopicsResult res = admin.createTopics(topics,
                    new CreateTopicsOptions().validateOnly(r.path("validateOnly").asBoolean(false)));
            ObjectNode out = obj();
            for (NewTopic t : topics) {
                ObjectNode o = out.putObject(t.name());
                try {
                    o.put("partitions", res.numPartitions(t.name()).get());
                    o.put("replicationFactor", res.replicationFactor(t.name()).get());
                    o.put("topicId", r.path("validateOnly").asBoolean(false) ? null : res.topicId(t.name()).get().toString());
                    ObjectNode cfg = o.putObject("configs");
                    for (ConfigEntry e : res.config(t.name()).get().entries()) {
                        cfg.put(e.name(), e.value());
                    }
                } catch (Exception e) {
                    o.setAll(error(e));
                }
            }
            return out;
        });
        op("listTopics", r -> {
            ArrayNode names = JSON.createArrayNode();
            new TreeSet<>(admin.listTopics(new ListTopicsOptions().listInternal(r.path("internal").asBoolean(false)))
                    .names().get()).forEach(names::add);
            return obj().set("topics", names);
        });
        op("describeTopics", r -> {
            List<String> names = strings(r.get("topics"));
            Map<String, TopicDescription> all = admin.describeTopics(names,
                    new DescribeTopicsOptions().includeAuthorizedOperations(r.path("authorizedOperations").asBoolean(false)))
                    .allTopicNames().get();
            ObjectNode out = obj();
            for (String name : names) {
                out.set(name, topic(all.get(name)));
            }
            return out;
        });
        op("describeConfigs", r -> {
            ConfigResource resource = resource(r);
            Config config = admin.describeConfigs(List.of(resource),
                    new DescribeConfigsOptions().includeSynonyms(r.path("synonyms").asBoolean(false))
                            .includeDocumentation(r.path("documentation").asBoolean(false)))
                    .all().get().get(resource);
            ObjectNode out = obj();
            for (ConfigEntry e : config.entries()) {
                ObjectNode o = out.putObject(e.name());
                o.put("value", e.value());
                o.put("source", e.source().name());
                o.put("isDefault", e.isDefault());
                o.put("isReadOnly", e.isReadOnly());
                o.put("isSensitive", e.isSensitive());
                o.put("type", e.type().name());
                o.put("documentation", e.documentation());
                ArrayNode syn = o.putArray("synonyms");
                for (ConfigEntry.ConfigSynonym s : e.synonyms()) {
                    syn.addObject().put("name", s.name()).put("value", s.value()).put("source", s.source().name());
                }
            }
            return out;
        });
        op("incrementalAlterConfigs", r -> {
            ConfigResource resource = resource(r);
            List<AlterConfigOp> ops = new ArrayList<>();
            for (JsonNode o : r.get("ops")) {
                ops.add(new AlterConfigOp(new ConfigEntry(o.get("name").asText(),
                        o.path("value").isNull() ? null : o.path("value").asText()),
                        AlterConfigOp.OpType.valueOf(o.path("type").asText("SET"))));
            }
            admin.incrementalAlterConfigs(Map.of(resource, ops),
                    new AlterConfigsOptions().validateOnly(r.path("validateOnly").asBoolean(false))).all().get();
            return obj();
        });
        op("listOffsets", r -> {
            Map<TopicPartition, OffsetSpec> specs = new HashMap<>();
            r.get("partitions").fields().forEachRemaining(e -> specs.put(tp(e.getKey()), spec(e.getValue().asText())));
            ListOffsetsOptions options = new ListOffsetsOptions(
                    org.apache.kafka.common.IsolationLevel.valueOf(r.path("isolation").asText("READ_UNCOMMITTED")));
            Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> res = admin.listOffsets(specs, options).all().get();
            ObjectNode out = obj();
            res.forEach((k, v) -> out.putObject(k.toString()).put("offset", v.offset()).put("timestamp", v.timestamp())
                    .put("leaderEpoch", v.leaderEpoch().orElse(-1)));
            return out;
        });
        op("deleteRecords", r -> {
            Map<TopicPartition, RecordsToDelete> del = new HashMap<>();
            r.get("partitions").fields().forEachRemaining(e ->
                    del.put(tp(e.getKey()), RecordsToDelete.beforeOffset(e.getValue().asLong())));
            ObjectNode out = obj();
            for (var e : admin.deleteRecords(del).lowWatermarks().entrySet()) {
                out.put(e.getKey().toString(), e.getValue().get().lowWatermark());
            }
            return out;
        });
        op("describeLogDirs", r -> {
            Map<Integer, Map<String, LogDirDescription>> res = admin.describeLogDirs(List.of(r.path("broker").asInt(1)))
                    .allDescriptions().get();
            ObjectNode out = obj();
            for (var broker : res.entrySet()) {
                ObjectNode b = out.putObject(String.valueOf(broker.getKey()));
                for (var dir : broker.getValue().entrySet()) {
                    LogDirDescription d = dir.getValue();
                    ObjectNode o = b.putObject(dir.getKey());
                    o.put("error", d.error() == null ? null : d.error().getClass().getSimpleName());
                    o.put("totalBytes", d.totalBytes().isPresent() ? d.totalBytes().getAsLong() : null);
                    o.put("usableBytes", d.usableBytes().isPresent() ? d.usableBytes().getAsLong() : null);
                    ObjectNode replicas = o.putObject("replicas");
                    d.replicaInfos().forEach((k, v) -> replicas.putObject(k.toString()).put("size", v.size())
                            .put("offsetLag", v.offsetLag()).put("isFuture", v.isFuture()));
                }
            }
            return out;
        });
        op("alterReplicaLogDirs", r -> {
            // {"broker": n, "partitions": {"topic-p": "/log/dir"}} -> {"topic-p": null | error}
            int broker = r.path("broker").asInt(1);
            Map<TopicPartitionReplica, String> moves = new LinkedHashMap<>();
            r.get("partitions").fields().forEachRemaining(e -> {
                TopicPartition t = tp(e.getKey());
                moves.put(new TopicPartitionReplica(t.topic(), t.partition(), broker), e.getValue().asText());
            });
            ObjectNode out = obj();
            for (var e : admin.alterReplicaLogDirs(moves).values().entrySet()) {
                String key = e.getKey().topic() + "-" + e.getKey().partition();
                try {
                    e.getValue().get();
                    out.putNull(key);
                } catch (Exception ex) {
                    out.set(key, error(ex));
                }
            }
            return out;
        });
        op("describeReplicaLogDirs", r -> {
            // what kafka-reassign-partitions.sh --verify reads: each replica's current and future dir
            int broker = r.path("broker").asInt(1);
            List<TopicPartitionReplica> replicas = new ArrayList<>();
            for (String s : strings(r.get("partitions"))) {
                TopicPartition t = tp(s);
                replicas.add(new TopicPartitionReplica(t.topic(), t.partition(), broker));
            }
            ObjectNode out = obj();
            for (var e : admin.describeReplicaLogDirs(replicas).all().get().entrySet()) {
                DescribeReplicaLogDirsResult.ReplicaLogDirInfo info = e.getValue();
                out.putObject(e.getKey().topic() + "-" + e.getKey().partition())
                        .put("currentReplicaLogDir", info.getCurrentReplicaLogDir())
                        .put("currentReplicaOffsetLag", info.getCurrentReplicaOffsetLag())
                        .put("futureReplicaLogDir", info.getFutureReplicaLogDir())
                        .put("futureReplicaOffsetLag", info.getFutureReplicaOffsetLag());
            }
            return out;
        });
        op("listConsumerGroups", r -> {
            ObjectNode out = obj();
            for (ConsumerGroupListing g : admin.listConsumerGroups().all().get()) {
                out.putObject(g.groupId()).put("state", g.groupState().map(Enum::name).orElse(null))
                        .put("type", g.type().map(Enum::name).orElse(null))
                        .put("simple", g.isSimpleConsumerGroup());
            }
            return out;
        });
        op("listGroups", r -> {
            ObjectNode out = obj();
            for (GroupListing g : admin.listGroups().all().get()) {
                out.putObject(g.groupId()).put("state", g.groupState().map(Enum::name).orElse(null))
                        .put("type", g.type().map(Enum::name).orElse(null)).put("protocol", g.protocol());
            }
            return out;
        });
        op("describeConsumerGroups", r -> {
            List<String> ids = strings(r.get("groups"));
            Map<String, ConsumerGroupDescription> res = admin.describeConsumerGroups(ids,
                    new DescribeConsumerGroupsOptions().includeAuthorizedOperations(true)).all().get();
            ObjectNode out = obj();
            for (String id : ids) {
                ConsumerGroupDescription g = res.get(id);
                ObjectNode o = out.putObject(id);
                o.put("state", g.groupState().name());
                o.put("type", g.type().name());
                o.put("simple", g.isSimpleConsumerGroup());
                o.put("assignor", g.partitionAssignor());
                o.set("coordinator", node(g.coordinator()));
                o.put("groupEpoch", g.groupEpoch().orElse(null));
                o.put("targetAssignmentEpoch", g.targetAssignmentEpoch().orElse(null));
                o.set("authorizedOperations", ops(g.authorizedOperations()));
                ArrayNode members = o.putArray("members");
                for (MemberDescription m : g.members()) {
                    ObjectNode mo = members.addObject();
                    mo.put("memberId", m.consumerId());
                    mo.put("clientId", m.clientId());
                    mo.put("host", m.host());
                    mo.put("instanceId", m.groupInstanceId().orElse(null));
                    mo.put("memberEpoch", m.memberEpoch().orElse(null));
                    ArrayNode a = mo.putArray("assignment");
                    m.assignment().topicPartitions().stream().map(TopicPartition::toString).sorted().forEach(a::add);
                }
            }
            return out;
        });
        op("listConsumerGroupOffsets", r -> {
            Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> res =
                    admin.listConsumerGroupOffsets(r.get("group").asText()).partitionsToOffsetAndMetadata().get();
            ObjectNode out = obj();
            res.forEach((k, v) -> out.put(k.toString(), v == null ? null : v.offset()));
            return out;
        });
        op("deleteConsumerGroups", r -> {
            admin.deleteConsumerGroups(strings(r.get("groups"))).all().get();
            return obj();
        });
        op("listTransactions", r -> {
            ListTransactionsOptions options = new ListTransactionsOptions();
            if (r.has("producerIds")) {
                Set<Long> ids = new HashSet<>();
                r.get("producerIds").forEach(n -> ids.add(n.asLong()));
                options.filterProducerIds(ids);
            }
            if (r.has("durationMs")) {
                options.filterOnDuration(r.get("durationMs").asLong());
            }
            ObjectNode out = obj();
            for (TransactionListing t : admin.listTransactions(options).all().get()) {
                out.putObject(t.transactionalId()).put("producerId", t.producerId()).put("state", t.state().name());
            }
            return out;
        });
        op("describeTransactions", r -> {
            List<String> ids = strings(r.get("ids"));
            Map<String, TransactionDescription> res = admin.describeTransactions(ids).all().get();
            ObjectNode out = obj();
            for (String id : ids) {
                TransactionDescription t = res.get(id);
                ObjectNode o = out.putObject(id);
                o.put("coordinatorId", t.coordinatorId());
                o.put("state", t.state().name());
                o.put("producerId", t.producerId());
                o.put("producerEpoch", t.producerEpoch());
                o.put("transactionTimeoutMs", t.transactionTimeoutMs());
                o.put("transactionStartTimeMs", t.transactionStartTimeMs().isPresent()
                        ? t.transactionStartTimeMs().getAsLong() : null);
                ArrayNode parts = o.putArray("partitions");
                t.topicPartitions().stream().map(TopicPartition::toString).sorted().forEach(parts::add);
            }
            return out;
        });
        op("describeProducers", r -> {
            List<TopicPartition> tps = new ArrayList<>();
            r.get("partitions").forEach(n -> tps.add(tp(n.asText())));
            DescribeProducersOptions options = new DescribeProducersOptions();
            if (r.has("broker")) {
                options.brokerId(r.get("broker").asInt());
            }
            ObjectNode out = obj();
            for (var e : admin.describeProducers(tps, options).all().get().entrySet()) {
                ArrayNode a = out.putArray(e.getKey().toString());
                for (ProducerState p : e.getValue().activeProducers()) {
                    a.addObject().put("producerId", p.producerId()).put("producerEpoch", p.producerEpoch())
                            .put("lastSequence", p.lastSequence()).put("lastTimestamp", p.lastTimestamp())
                            .put("coordinatorEpoch", p.coordinatorEpoch().isPresent() ? p.coordinatorEpoch().getAsInt() : null)
                            .put("currentTransactionStartOffset", p.currentTransactionStartOffset().isPresent()
                                    ? p.currentTransactionStartOffset().getAsLong() : null);
                }
            }
            return out;
        });
        op("deleteTopics", r -> {
            admin.deleteTopics(strings(r.get("topics"))).all().get();
            return obj();
        });
        op("describeCluster", r -> {
            DescribeClusterResult res = admin.describeCluster(new DescribeClusterOptions().includeAuthorizedOperations(true));
            ObjectNode out = obj();
            out.put("clusterId", res.clusterId().get());
            out.set("controller", node(res.controller().get()));
            ArrayNode nodes = out.putArray("nodes");
            res.nodes().get().forEach(n -> nodes.add(node(n)));
            out.set("authorizedOperations", ops(res.authorizedOperations().get()));
            return out;
        });
        op("alterClientQuotas", r -> {
            // {"entity": {"client-id": "x" | null for the default, "user": ...}, "quotas": {key: value | null}}
            Map<String, String> entity = new HashMap<>();
            r.get("entity").fields().forEachRemaining(e -> entity.put(e.getKey(), e.getValue().isNull() ? null : e.getValue().asText()));
            List<org.apache.kafka.common.quota.ClientQuotaAlteration.Op> ops = new ArrayList<>();
            r.get("quotas").fields().forEachRemaining(e -> ops.add(new org.apache.kafka.common.quota.ClientQuotaAlteration.Op(
                    e.getKey(), e.getValue().isNull() ? null : e.getValue().asDouble())));
            admin.alterClientQuotas(List.of(new org.apache.kafka.common.quota.ClientQuotaAlteration(
                    new org.apache.kafka.common.quota.ClientQuotaEntity(entity), ops))).all().get();
            return obj();
        });
        op("describeClientQuotas", r -> {
            ObjectNode out = obj();
            admin.describeClientQuotas(org.apache.kafka.common.quota.ClientQuotaFilter.all()).entities().get()
                    .forEach((entity, quotas) -> {
                        ObjectNode q = out.putObject(new TreeMap<>(entity.entries()).toString());
                        quotas.forEach(q::put);
                    });
            return out;
        });
        op("describeUserScramCredentials", r -> {
            ObjectNode out = obj();
            admin.describeUserScramCredentials().all().get().forEach((user, d) -> {
                ArrayNode a = out.putArray(user);
                d.credentialInfos().forEach(c -> a.addObject().put("mechanism", c.mechanism().name()).put("iterations", c.iterations()));
            });
            return out;
        });
        op("alterUserScramCredentials", r -> {
            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(r.get("user").asText(),
                    new ScramCredentialInfo(ScramMechanism.valueOf(r.get("mechanism").asText()), r.get("iterations").asInt()),
                    r.get("password").asText()))).all().get();
            return obj();
        });
        op("describeAcls", r -> {
            ArrayNode out = JSON.createArrayNode();
            admin.describeAcls(org.apache.kafka.common.acl.AclBindingFilter.ANY).values().get()
                    .forEach(b -> out.add(b.toString()));
            return obj().set("acls", out);
        });
        op("listPartitionReassignments", r -> {
            ObjectNode out = obj();
            admin.listPartitionReassignments().reassignments().get().forEach((k, v) -> out.put(k.toString(), v.toString()));
            return out;
        });
        op("electLeaders", r -> {
            Set<TopicPartition> tps = null;
            if (r.has("partitions")) {
                tps = new HashSet<>();
                for (JsonNode n : r.get("partitions")) {
                    tps.add(tp(n.asText()));
                }
            }
            ObjectNode out = obj();
            admin.electLeaders(org.apache.kafka.common.ElectionType.valueOf(r.path("type").asText("PREFERRED")), tps)
                    .partitions().get().forEach((k, v) -> out.put(k.toString(), v.map(t -> t.getClass().getSimpleName()).orElse(null)));
            return out;
        });
        op("createPartitions", r -> {
            admin.createPartitions(Map.of(r.get("topic").asText(), NewPartitions.increaseTo(r.get("count").asInt()))).all().get();
            return obj();
        });
        op("alterConsumerGroupOffsets", r -> {
            Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> offsets = new HashMap<>();
            r.get("offsets").fields().forEachRemaining(e -> offsets.put(tp(e.getKey()),
                    new org.apache.kafka.clients.consumer.OffsetAndMetadata(e.getValue().asLong())));
            admin.alterConsumerGroupOffsets(r.get("group").asText(), offsets).all().get();
            return obj();
        });
        op("deleteConsumerGroupOffsets", r -> {
            Set<TopicPartition> tps = new HashSet<>();
            r.get("partitions").forEach(n -> tps.add(tp(n.asText())));
            admin.deleteConsumerGroupOffsets(r.get("group").asText(), tps).all().get();
            return obj();
        });
        op("removeMembersFromConsumerGroup", r -> {
            admin.removeMembersFromConsumerGroup(r.get("group").asText(), new RemoveMembersFromConsumerGroupOptions()).all().get();
            return obj();
        });
        op("fenceProducers", r -> {
            FenceProducersResult res = admin.fenceProducers(strings(r.get("ids")));
            ObjectNode out = obj();
            for (String id : strings(r.get("ids"))) {
                out.putObject(id).put("producerId", res.producerId(id).get()).put("epoch", res.epochId(id).get());
            }
            return out;
        });
        op("describeFeatures", r -> {
            FeatureMetadata f = admin.describeFeatures().featureMetadata().get();
            ObjectNode out = obj();
            out.put("epoch", f.finalizedFeaturesEpoch().orElse(null));
            ObjectNode fin = out.putObject("finalized");
            f.finalizedFeatures().forEach((k, v) -> fin.putObject(k).put("min", v.minVersionLevel()).put("max", v.maxVersionLevel()));
            ObjectNode sup = out.putObject("supported");
            f.supportedFeatures().forEach((k, v) -> sup.putObject(k).put("min", v.minVersion()).put("max", v.maxVersion()));
            return out;
        });
        op("updateFeatures", r -> {
            // {"features": {name: [level, "UPGRADE" | "SAFE_DOWNGRADE" | "UNSAFE_DOWNGRADE"]},
            //  "validateOnly": bool} -> {name: null | error}: what kafka-features.sh upgrade/downgrade sends
            Map<String, FeatureUpdate> updates = new LinkedHashMap<>();
            r.get("features").fields().forEachRemaining(e -> updates.put(e.getKey(), new FeatureUpdate(
                    (short) e.getValue().get(0).asInt(), FeatureUpdate.UpgradeType.valueOf(e.getValue().get(1).asText()))));
            UpdateFeaturesOptions options = new UpdateFeaturesOptions().validateOnly(r.path("validateOnly").asBoolean(false));
            ObjectNode out = obj();
            for (var e : admin.updateFeatures(updates, options).values().entrySet()) {
                try {
                    e.getValue().get();
                    out.putNull(e.getKey());
                } catch (Exception ex) {
                    out.set(e.getKey(), error(ex));
                }
            }
            return out;
        });
        op("describeMetadataQuorum", r -> {
            QuorumInfo q = admin.describeMetadataQuorum().quorumInfo().get();
            ObjectNode out = obj();
            out.put("leaderId", q.leaderId());
            out.put("leaderEpoch", q.leaderEpoch());
            out.put("highWatermark", q.highWatermark());
            ArrayNode voters = out.putArray("voters");
            q.voters().forEach(v -> voters.addObject().put("replicaId", v.replicaId()).put("logEndOffset", v.logEndOffset()));
            ArrayNode observers = out.putArray("observers");
            q.observers().forEach(v -> observers.addObject().put("replicaId", v.replicaId()).put("logEndOffset", v.logEndOffset()));
            return out;
        });
    }

    @Override
    protected void close() {
        admin.close();
    }

    static List<String> strings(JsonNode array) {
        List<String> out = new ArrayList<>();
        array.forEach(n -> out.add(n.asText()));
        return out;
    }

    static TopicPartition tp(String s) {
        int dash = s.lastIndexOf('-');
        return new TopicPartition(s.substring(0, dash), Integer.parseInt(s.substring(dash + 1)));
    }

    static OffsetSpec spec(String s) {
        switch (s) {
            case "earliest": return OffsetSpec.earliest();
            case "latest": return OffsetSpec.latest();
            case "maxTimestamp": return OffsetSpec.maxTimestamp();
            case "earliestLocal": return OffsetSpec.earliestLocal();
            case "latestTiered": return OffsetSpec.latestTiered();
            default: return OffsetSpec.forTimestamp(Long.parseLong(s));
        }
    }

    static ConfigResource resource(JsonNode r) {
        return new ConfigResource(ConfigResource.Type.valueOf(r.path("type").asText("TOPIC")), r.get("name").asText());
    }

    static JsonNode node(Node n) {
        if (n == null) {
            return JSON.nullNode();
        }
        return obj().put("id", n.id()).put("host", n.host()).put("port", n.port()).put("rack", n.rack());
    }

    static JsonNode ops(Set<AclOperation> ops) {
        if (ops == null) {
            return JSON.nullNode();
        }
        ArrayNode a = JSON.createArrayNode();
        ops.stream().map(Enum::name).sorted().forEach(a::add);
        return a;
    }

    static JsonNode ints(List<Node> nodes) {
        ArrayNode a = JSON.createArrayNode();
        nodes.forEach(n -> a.add(n.id()));
        return a;
    }

    static JsonNode topic(TopicDescription t) {
        ObjectNode o = obj();
        o.put("name", t.name());
        o.put("internal", t.isInternal());
        o.put("topicId", t.topicId() == null ? null : t.topicId().toString());
        o.set("authorizedOperations", ops(t.authorizedOperations()));
        ArrayNode parts = o.putArray("partitions");
        for (TopicPartitionInfo p : t.partitions()) {
            ObjectNode po = parts.addObject();
            po.put("partition", p.partition());
            po.set("leader", node(p.leader()));
            po.set("replicas", ints(p.replicas()));
            po.set("isr", ints(p.isr()));
            po.set("elr", p.elr() == null ? JSON.nullNode() : ints(p.elr()));
            po.set("lastKnownElr", p.lastKnownElr() == null ? JSON.nullNode() : ints(p.lastKnownElr()));
        }
        return o;
    }
}
