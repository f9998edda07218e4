// The RocketMQ 5.x Java SDK (rocketmq-client-java, gRPC) as an application uses it, for
// tests/integration/test_grpc_sdk.py: a Producer that sends, a SimpleConsumer that receives
// and acks. Built by tools/rocketmq/fetch_sdk.sh. Options are key=value arguments:
//   mode=send|receive endpoint=HOST:PORT ak=.. sk=.. topic=.. group=.. count=N run=..
//   fifo=true (send: message groups order-0..2) timeoutS=60 (receive)
//   ssl=true (TLS; the SDK then trusts any server certificate, its own default)
// Without ak=/sk= the pair comes from ROCKETMQ_ACCESS_KEY / ROCKETMQ_SECRET_KEY (a pod maps
// them from the group's Secret: tests/cluster/test_grpc_sdk_in_cluster.py).
// One JSON line per message on stdout, then a line containing "summary".
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;

public class GrpcSdkClient {
    static final Map<String, String> OPTS = new HashMap<>();

    static String opt(String key, String dflt) {
        return OPTS.getOrDefault(key, dflt);
    }

    static String env(String name) {
        String value = System.getenv(name);
        return value == null ? "" : value;
    }

    static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    static String line(String id, String body, String tag, Iterable<String> keys,
                       Map<String, String> props, String group, int attempt) {
        StringBuilder k = new StringBuilder("[");
        for (String key : keys) {
            k.append(k.length() > 1 ? "," : "").append(json(key));
        }
        StringBuilder p = new StringBuilder("{");
        for (Map.Entry<String, String> e : new TreeMap<>(props).entrySet()) {
            p.append(p.length() > 1 ? "," : "").append(json(e.getKey())).append(':').append(json(e.getValue()));
        }
        return "{\"messageId\":" + json(id) + ",\"body\":" + json(body) + ",\"tag\":" + json(tag)
            + ",\"keys\":" + k + "],\"props\":" + p + "},\"group\":" + json(group)
            + ",\"attempt\":" + attempt + "}";
    }

    public static void main(String[] args) throws Exception {
        for (String a : args) {
            int eq = a.indexOf('=');
            OPTS.put(a.substring(0, eq), a.substring(eq + 1));
        }
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration config = ClientConfiguration.newBuilder()
            .setEndpoints(opt("endpoint", "127.0.0.1:8081"))
            .setCredentialProvider(new StaticSessionCredentialsProvider(
                opt("ak", env("ROCKETMQ_ACCESS_KEY")), opt("sk", env("ROCKETMQ_SECRET_KEY"))))
            .enableSsl(Boolean.parseBoolean(opt("ssl", "false")))
            .setRequestTimeout(Duration.ofSeconds(5))
            .build();
        String topic = opt("topic", "GrpcJava");
        int count = Integer.parseInt(opt("count", "10"));
        String run = opt("run", "java");
        if (opt("mode", "send").equals("send")) {
            boolean fifo = Boolean.parseBoolean(opt("fifo", "false"));
            int ok = 0;
            try (Producer producer = provider.newProducerBuilder()
                .setClientConfiguration(config).setTopics(topic).build()) {
                for (int i = 0; i < count; i++) {
                    String body = run + "-body-" + i;
                    MessageBuilder mb = provider.newMessageBuilder().setTopic(topic)
                        .setTag("tag" + (i % 3)).setKeys("key-" + run + "-" + i)
                        .addProperty("seq", String.valueOf(i)).addProperty("run", run)
                        .setBody(body.getBytes(StandardCharsets.UTF_8));
                    String group = fifo ? "order-" + (i % 3) : "";
                    if (fifo) {
                        mb.setMessageGroup(group);
                    }
                    Message m = mb.build();
                    SendReceipt receipt = producer.send(m);
                    ok++;
                    System.out.println(line(receipt.getMessageId().toString(), body, "tag" + (i % 3),
                        Collections.singletonList("key-" + run + "-" + i),
                        Map.of("seq", String.valueOf(i), "run", run), group, 0));
                }
            }
            System.out.println("{\"summary\":true,\"sent\":" + ok + "}");
            return;
        }
        String consumerGroup = opt("group", "GrpcJavaGroup");
        long deadline = System.currentTimeMillis() + 1000L * Integer.parseInt(opt("timeoutS", "60"));
        int got = 0;
        try (SimpleConsumer consumer = provider.newSimpleConsumerBuilder()
            .setClientConfiguration(config).setConsumerGroup(consumerGroup)
            .setSubscriptionExpressions(Collections.singletonMap(topic,
                new FilterExpression("*", FilterExpressionType.TAG)))
            .setAwaitDuration(Duration.ofSeconds(2)).build()) {
            while (got < count && System.currentTimeMillis() < deadline) {
                List<MessageView> views;
                try {
                    views = consumer.receive(32, Duration.ofSeconds(15));
                } catch (Exception e) {
                    Thread.sleep(200);
                    continue;
                }
                for (MessageView v : views) {
                    if (!ackWithRetries(consumer, v)) {
                        continue;  // not acked: it comes back after its invisible time
                    }
                    ByteBuffer buf = v.getBody();
                    byte[] bytes = new byte[buf.remaining()];
                    buf.get(bytes);
                    System.out.println(line(v.getMessageId().toString(),
                        new String(bytes, StandardCharsets.UTF_8), v.getTag().orElse(""),
                        v.getKeys(), v.getProperties(), v.getMessageGroup().orElse(""),
                        v.getDeliveryAttempt()));
                    got++;
                }
            }
        }
        System.out.println("{\"summary\":true,\"received\":" + got + "}");
    }

    /** What an application does with a refused ack: the receipt handle stays valid for the
     * invisible time (15 s here), so it tries again. A master refuses an ack it could not
     * replicate before its lease lapsed (FENCED); CI run 46 saw one under load. */
    static boolean ackWithRetries(SimpleConsumer consumer, MessageView v) throws InterruptedException {
        for (int attempt = 1; ; attempt++) {
            try {
                consumer.ack(v);
                return true;
            } catch (ClientException e) {
                System.err.println("ack " + v.getMessageId() + " attempt " + attempt + ": " + e);
                if (attempt == 10) {
                    return false;
                }
                Thread.sleep(1000);
            }
        }
    }
}
