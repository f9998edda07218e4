// StoreFixtureProducer.java -- the producer of tests/fixtures/rocketmq/store-3replicas
// (tools/rocketmq/store_fixture.py runs it). Stock DefaultMQProducer, sync sends, one JSON
// line per SEND_OK message appended to ACK_LOG.
//
//   java -cp "<classes>:<server/lib>/*" StoreFixtureProducer NAMESRV FROM TO ACK_LOG
//
// Message i (FROM <= i < TO) of topic FixtureC, chosen by i:
//   i % 10 == 3  delay message, delay level 1 + i % 3 (1 s, 5 s, 10 s): stored in
//                SCHEDULE_TOPIC_XXXX with REAL_TOPIC/REAL_QID, delivered to FixtureC later;
//   i % 10 == 7  timer message, deliverTimeMs = now + 3 s: stored in rmq_sys_wheel_timer;
//   i % 25 == 11 a batch of 4 messages (send(Collection)): 4 acks from one SendResult;
//   else         a normal message.
// Body: bodyLen bytes equal to i % 251, bodyLen = 1 + (i * 2654435761 mod 6000): about a third
// are over 4 KiB, which the client compresses (compressMsgBodyOverHowmuch = 4096; batches are
// never compressed). Keys k-<i>[-<member>]; user property seq=<i>.
//
// Ack line: topic, queueId, queueOffset (of the queue the store kept: for a delay or timer
// message the system topic's), msgId (UNIQ_KEY), offsetMsgId (store host + commit log
// offset), key, bodyCrc (CRC32 of the body as sent, unsigned), bodyLen, ackTimeMs, brokerName,
// kind, seq. A batch's SendResult joins its members' ids with commas; one line per member
// (queueOffset + member index).
import java.io.FileWriter;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.zip.CRC32;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

public class StoreFixtureProducer {
    static final String TOPIC = "FixtureC";

    static byte[] body(int i) {
        byte[] b = new byte[1 + (int) ((i * 2654435761L) % 6000)];
        Arrays.fill(b, (byte) (i % 251));
        return b;
    }

    static Message message(int i, String key, byte[] body) {
        Message m = new Message(TOPIC, body);
        m.setKeys(key);
        m.putUserProperty("seq", Integer.toString(i));
        return m;
    }

    public static void main(String[] a) throws Exception {
        int from = Integer.parseInt(a[1]), to = Integer.parseInt(a[2]);
        DefaultMQProducer p = new DefaultMQProducer("store_fixture_producer");
        p.setNamesrvAddr(a[0]);
        p.setInstanceName("store-fixture-" + ProcessHandle.current().pid());
        p.setRetryTimesWhenSendFailed(0);  // every SEND_OK is one logged attempt
        p.start();
        try (PrintWriter w = new PrintWriter(new FileWriter(a[3], true))) {
            for (int i = from; i < to; i++) {
                if (i % 25 == 11) {
                    List<Message> batch = new ArrayList<>();
                    for (int k = 0; k < 4; k++) {
                        // Small bodies: a batch is never compressed and must fit maxMessageSize.
                        byte[] b = Arrays.copyOf(body(i), 200 + 100 * k);
                        batch.add(message(i, "k-" + i + "-" + k, b));
                    }
                    SendResult r = sendWithRetry(p, batch, null, "batch " + i);
                    String[] ids = r.getMsgId().split(",");
                    String[] offs = r.getOffsetMsgId().split(",");
                    for (int k = 0; k < batch.size(); k++) {
                        log(w, r, k, ids[k], offs[k], batch.get(k), "batch", i);
                    }
                    continue;
                }
                Message m = message(i, "k-" + i, body(i));
                String kind = "normal";
                if (i % 10 == 3) {
                    m.setDelayTimeLevel(1 + i % 3);
                    kind = "delay";
                } else if (i % 10 == 7) {
                    m.setDeliverTimeMs(System.currentTimeMillis() + 3000);
                    kind = "timer";
                }
                SendResult r = sendWithRetry(p, null, m, "message " + i);
                log(w, r, 0, r.getMsgId(), r.getOffsetMsgId(), m, kind, i);
            }
        }
        p.shutdown();
        System.exit(0);
    }

    static SendResult sendWithRetry(DefaultMQProducer p, List<Message> batch, Message m, String what)
        throws Exception {
        for (int t = 0; ; t++) {
            try {
                SendResult r = batch != null ? p.send(batch, 10000) : p.send(m, 10000);
                if (r.getSendStatus() == SendStatus.SEND_OK) {
                    return r;
                }
                System.err.println("status " + r.getSendStatus() + " " + what);
            } catch (Exception e) {
                System.err.println("error " + what + ": " + e);
            }
            if (t > 90) {
                throw new RuntimeException("giving up on " + what);
            }
            Thread.sleep(1000);
        }
    }

    static void log(PrintWriter w, SendResult r, int member, String msgId, String offsetMsgId,
        Message m, String kind, int seq) {
        CRC32 c = new CRC32();
        c.update(m.getBody());
        w.printf("{\"topic\":\"%s\",\"queueId\":%d,\"queueOffset\":%d,\"msgId\":\"%s\","
                + "\"offsetMsgId\":\"%s\",\"key\":\"%s\",\"bodyCrc\":%d,\"bodyLen\":%d,"
                + "\"ackTimeMs\":%d,\"brokerName\":\"%s\",\"kind\":\"%s\",\"seq\":%d}%n",
            r.getMessageQueue().getTopic(), r.getMessageQueue().getQueueId(),
            r.getQueueOffset() + member, msgId, offsetMsgId, m.getKeys(), c.getValue(),
            m.getBody().length, System.currentTimeMillis(), r.getMessageQueue().getBrokerName(),
            kind, seq);
        w.flush();
    }
}
