// Java producers and consumers as a request loop, with every AdminShell op too (one JVM per test
// module): `java ClientShell <bootstrap>`. Clients
// are named, so a test drives several at once (two transactional producers to see fencing, a
// consumer feeding a producer's sendOffsetsToTransaction). Keys, values and header values travel
// as UTF-8 strings (null stays null).
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.Future;

public class ClientShell extends AdminShell {
    private final String bootstrap;
    private final Map<String, KafkaProducer<String, String>> producers = new HashMap<>();
    private final Map<String, KafkaConsumer<String, String>> consumers = new HashMap<>();

    public static void main(String[] args) throws Exception {
        new ClientShell(args[0]).serve();
    }

    ClientShell(String bootstrap) {
        super(bootstrap);
        this.bootstrap = bootstrap;

        op("producer", r -> {
            Properties props = props(r);
            props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            producers.put(r.get("name").asText(), new KafkaProducer<>(props));
            return obj();
        });
        op("send", r -> {
            KafkaProducer<String, String> p = producer(r);
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (JsonNode rec : r.get("records")) {
                ProducerRecord<String, String> pr = new ProducerRecord<>(
                        rec.has("topic") ? rec.get("topic").asText() : r.get("topic").asText(),
                        rec.has("partition") ? rec.get("partition").asInt() : null,
                        rec.has("timestamp") ? rec.get("timestamp").asLong() : null,
                        text(rec.get("key")), text(rec.get("value")));
                rec.path("headers").fields().forEachRemaining(e -> pr.headers().add(e.getKey(),
                        e.getValue().isNull() ? null : e.getValue().asText().getBytes(StandardCharsets.UTF_8)));
                sent.add(p.send(pr));
            }
            if (r.path("flush").asBoolean(true)) {
                p.flush();
            }
            ArrayNode out = JSON.createArrayNode();
            for (Future<RecordMetadata> f : sent) {
                RecordMetadata m = f.get();
                out.addObject().put("topic", m.topic()).put("partition", m.partition()).put("offset", m.offset())
                        .put("timestamp", m.timestamp());
            }
            return obj().set("sent", out);
        });
        op("flush", r -> {
            producer(r).flush();
            return obj();
        });
        op("initTransactions", r -> {
            producer(r).initTransactions();
            return obj();
        });
        op("beginTransaction", r -> {
            producer(r).beginTransaction();
            return obj();
        });
        op("commitTransaction", r -> {
            producer(r).commitTransaction();
            return obj();
        });
        op("abortTransaction", r -> {
            producer(r).abortTransaction();
            return obj();
        });
        op("sendOffsetsToTransaction", r -> {
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            r.get("offsets").fields().forEachRemaining(e ->
                    offsets.put(AdminShell.tp(e.getKey()), new OffsetAndMetadata(e.getValue().asLong())));
            ConsumerGroupMetadata group = r.has("consumer")
                    ? consumer(r.get("consumer").asText()).groupMetadata()
                    : new ConsumerGroupMetadata(r.get("group").asText());
            producer(r).sendOffsetsToTransaction(offsets, group);
            return obj();
        });
        op("closeProducer", r -> {
            KafkaProducer<String, String> p = producers.remove(r.get("name").asText());
            if (p != null) {
                p.close(Duration.ofSeconds(10));
            }
            return obj();
        });
        op("consumer", r -> {
            Properties props = props(r);
            props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            props.putIfAbsent(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            consumers.put(r.get("name").asText(), new KafkaConsumer<>(props));
            return obj();
        });
        op("subscribe", r -> {
            consumer(r.get("name").asText()).subscribe(AdminShell.strings(r.get("topics")));
            return obj();
        });
        op("assign", r -> {
            List<TopicPartition> tps = new ArrayList<>();
            r.get("partitions").forEach(n -> tps.add(AdminShell.tp(n.asText())));
            consumer(r.get("name").asText()).assign(tps);
            return obj();
        });
        op("poll", r -> {
            // poll until `count` records arrived or `timeoutMs` passed (then answer what came)
            KafkaConsumer<String, String> c = consumer(r.get("name").asText());
            int count = r.path("count").asInt(1);
            long deadline = System.currentTimeMillis() + r.path("timeoutMs").asLong(20000);
            ArrayNode records = JSON.createArrayNode();
            while (records.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> rec : c.poll(Duration.ofMillis(200))) {
                    ObjectNode o = records.addObject();
                    o.put("topic", rec.topic()).put("partition", rec.partition()).put("offset", rec.offset())
                            .put("key", rec.key()).put("value", rec.value()).put("timestamp", rec.timestamp());
                    ObjectNode h = o.putObject("headers");
                    for (Header header : rec.headers()) {
                        h.put(header.key(), header.value() == null ? null : new String(header.value(), StandardCharsets.UTF_8));
                    }
                }
            }
            ArrayNode assignment = JSON.createArrayNode();
            c.assignment().stream().map(TopicPartition::toString).sorted().forEach(assignment::add);
            return obj().<ObjectNode>set("records", records).set("assignment", assignment);
        });
        op("position", r -> {
            KafkaConsumer<String, String> c = consumer(r.get("name").asText());
            ObjectNode out = obj();
            for (TopicPartition tp : c.assignment()) {
                out.put(tp.toString(), c.position(tp));
            }
            return out;
        });
        op("commitSync", r -> {
            consumer(r.get("name").asText()).commitSync();
            return obj();
        });
        op("endOffsets", r -> {
            List<TopicPartition> tps = new ArrayList<>();
            r.get("partitions").forEach(n -> tps.add(AdminShell.tp(n.asText())));
            ObjectNode out = obj();
            consumer(r.get("name").asText()).endOffsets(tps).forEach((k, v) -> out.put(k.toString(), v));
            return out;
        });
        op("closeConsumer", r -> {
            KafkaConsumer<String, String> c = consumers.remove(r.get("name").asText());
            if (c != null) {
                c.close(Duration.ofSeconds(10));
            }
            return obj();
        });
    }

    @Override
    protected void close() {
        consumers.values().forEach(c -> c.close(Duration.ofSeconds(5)));
        producers.values().forEach(p -> p.close(Duration.ofSeconds(5)));
        super.close();
    }

    private Properties props(JsonNode r) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        r.path("props").fields().forEachRemaining(e -> props.put(e.getKey(), e.getValue().asText()));
        return props;
    }

    private KafkaProducer<String, String> producer(JsonNode r) {
        KafkaProducer<String, String> p = producers.get(r.get("name").asText());
        if (p == null) {
            throw new IllegalArgumentException("no producer " + r.get("name"));
        }
        return p;
    }

    private KafkaConsumer<String, String> consumer(String name) {
        KafkaConsumer<String, String> c = consumers.get(name);
        if (c == null) {
            throw new IllegalArgumentException("no consumer " + name);
        }
        return c;
    }

    private static String text(JsonNode n) {
        return n == null || n.isNull() ? null : n.asText();
    }
}
