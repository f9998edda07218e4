// FailoverClient.java -- a stock RocketMQ 5.3.1 producer and consumer with default settings
// (only the name server address and AclClientRPCHook set), for the failover tests and
// benchmark of stock brokers (tests/integration/test_local_rocketmq_engine.py,
// bench/rocketmq_controller.py). Compiled against the client jars tools/rocketmq/fetch.sh
// caches:
//
//   java -cp "<classes>:<home>/lib/*" FailoverClient produce NAMESRV AK SK TOPIC ACK_LOG STOP_FILE
//       sync sends until STOP_FILE exists; one JSON line per SEND_OK appended to ACK_LOG in the
//       audit's acknowledgement format (topic, queueId, queueOffset, msgId, offsetMsgId, key,
//       bodyCrc, bodyLen, ackTimeMs, brokerName, body). A failed send is printed on stderr
//       ("FAILED <seq> <exception>") and the next message goes on.
//   java … FailoverClient consume NAMESRV AK SK TOPIC GROUP ACK_LOG OUT TIMEOUT_MS
//       pulls the topic from its first offset until every msgId in ACK_LOG was received or
//       TIMEOUT_MS passed; one JSON line {msgId, body} per message received, to OUT.
//       Exit status 0 when every acknowledged message was received, else 1.
import java.io.FileWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.zip.CRC32;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class FailoverClient {
    public static void main(String[] a) throws Exception {
        AclClientRPCHook hook = new AclClientRPCHook(new SessionCredentials(a[2], a[3]));
        int status = a[0].equals("produce") ? produce(a, hook) : consume(a, hook);
        System.out.flush();
        System.exit(status);
    }

    static int produce(String[] a, AclClientRPCHook hook) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("failover-producer", hook);
        p.setNamesrvAddr(a[1]);
        p.setInstanceName("failover-" + ProcessHandle.current().pid());
        p.start();
        Path stop = Paths.get(a[6]);
        long failed = 0;
        try (PrintWriter w = new PrintWriter(new FileWriter(a[5], true))) {
            for (int i = 0; !Files.exists(stop); i++) {
                String body = "m-" + i + "-" + System.nanoTime();
                byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
                Message m = new Message(a[4], bytes);
                m.setKeys("k-" + i);
                try {
                    SendResult r = p.send(m);
                    if (r.getSendStatus() != SendStatus.SEND_OK) {
                        System.err.println("NOT_OK " + i + " " + r.getSendStatus());
                        continue;
                    }
                    CRC32 c = new CRC32();
                    c.update(bytes);
                    w.printf("{\"topic\":\"%s\",\"queueId\":%d,\"queueOffset\":%d,\"msgId\":\"%s\","
                            + "\"offsetMsgId\":\"%s\",\"key\":\"k-%d\",\"bodyCrc\":%d,\"bodyLen\":%d,"
                            + "\"ackTimeMs\":%d,\"brokerName\":\"%s\",\"body\":\"%s\"}%n",
                        r.getMessageQueue().getTopic(), r.getMessageQueue().getQueueId(),
                        r.getQueueOffset(), r.getMsgId(), r.getOffsetMsgId(), i, c.getValue(),
                        bytes.length, System.currentTimeMillis(),
                        r.getMessageQueue().getBrokerName(), body);
                    w.flush();
                } catch (Exception e) {
                    failed++;
                    System.err.println("FAILED " + i + " " + e);
                    Thread.sleep(100);
                }
                Thread.sleep(5);
            }
        } finally {
            p.shutdown();
        }
        System.err.println("producer stopped; " + failed + " failed sends");
        return 0;
    }

    static int consume(String[] a, AclClientRPCHook hook) throws Exception {
        Set<String> missing = new HashSet<>();
        Pattern id = Pattern.compile("\"msgId\":\"([0-9A-F]+)\"");
        for (String line : Files.readAllLines(Paths.get(a[6]))) {
            Matcher matcher = id.matcher(line);
            if (matcher.find()) {
                missing.add(matcher.group(1));
            }
        }
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(a[5], hook);
        c.setNamesrvAddr(a[1]);
        c.setInstanceName("failover-" + ProcessHandle.current().pid());
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(a[4], "*");
        c.start();
        long deadline = System.currentTimeMillis() + Long.parseLong(a[8]);
        try (PrintWriter w = new PrintWriter(new FileWriter(a[7], true))) {
            while (!missing.isEmpty() && System.currentTimeMillis() < deadline) {
                List<MessageExt> got = c.poll(1000);
                for (MessageExt m : got) {
                    String body = new String(m.getBody(), StandardCharsets.UTF_8);
                    w.printf("{\"msgId\":\"%s\",\"body\":\"%s\"}%n", m.getMsgId(), body);
                    missing.remove(m.getMsgId());
                }
                w.flush();
            }
        } finally {
            c.shutdown();
        }
        if (!missing.isEmpty()) {
            System.err.println(missing.size() + " acknowledged messages not received");
            return 1;
        }
        return 0;
    }
}
