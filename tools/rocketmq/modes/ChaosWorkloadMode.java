import java.io.BufferedWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.zip.CRC32;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Mode `chaosWorkload` (brokergroup chaos's stock workload, issue 37 item 1): topic=T
 * producers=N run=R stop=FILE sends=FILE receives=FILE [pause_ms=10] [send_timeout_ms=3000]
 * [group=G]. N producer threads, each its own DefaultMQProducer at the client's default retry
 * settings, send one message at a time until FILE `stop` exists: key `<R>p<i>-<seq>` (KEYS
 * property), body `<key>|` + 64 'x' (the chaos runner's body_of). One JSON line per send to
 * `sends`, written before the next send: client, seq, key, invokeMs, completeMs (wall clock),
 * outcome `ok` (SEND_OK) / `failed` (certainly never sent: no route) / `indeterminate`
 * (anything else: a timeout, a lost connection, FLUSH_SLAVE_TIMEOUT — it may be stored), the
 * status or error, queueId and queueOffset of an acknowledged send. A push consumer (group G,
 * from the first offset) writes one line per message it receives to `receives`: key, queueId,
 * queueOffset, bodyCrc (RocketMQ's crc32 of the body as received), brokerName, ms.
 */
public class ChaosWorkloadMode {
    static long crc(byte[] body) {
        CRC32 c = new CRC32();
        c.update(body);
        return c.getValue() & 0x7FFFFFFFL;
    }

    static byte[] body(String key) {
        return (key + "|" + "x".repeat(64)).getBytes(StandardCharsets.UTF_8);
    }

    static void run() throws Exception {
        String topic = StockClient.opt("topic", "chaos"), run = StockClient.opt("run", "");
        int producers = StockClient.intOpt("producers", 3), pauseMs = StockClient.intOpt("pause_ms", 10);
        Path stop = Paths.get(StockClient.opt("stop", "/nonexistent-stop-file"));
        BufferedWriter sends = Files.newBufferedWriter(Paths.get(StockClient.opt("sends", "sends.jsonl")));
        BufferedWriter receives = Files.newBufferedWriter(Paths.get(StockClient.opt("receives", "receives.jsonl")));
        AtomicLong received = new AtomicLong(), sent = new AtomicLong(), acked = new AtomicLong();

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(
            StockClient.opt("group", "chaos-workload"), StockClient.hook(), new AllocateMessageQueueAveragely());
        consumer.setNamesrvAddr(StockClient.opt("namesrv", "127.0.0.1:9876"));
        StockClient.deadlines(consumer);
        consumer.setInstanceName("chaos-consumer-" + ProcessHandle.current().pid());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.currentTimeMillis();
            synchronized (receives) {
                try {
                    for (MessageExt m : msgs) {
                        receives.append("{\"key\":" + StockClient.q(m.getKeys()) + ",\"queueId\":" + m.getQueueId()
                            + ",\"queueOffset\":" + m.getQueueOffset() + ",\"bodyCrc\":" + crc(m.getBody())
                            + ",\"brokerName\":" + StockClient.q(m.getBrokerName()) + ",\"ms\":" + now + "}\n");
                    }
                    receives.flush();
                } catch (java.io.IOException e) {
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                received.addAndGet(msgs.size());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < producers; i++) {
            String client = run + "p" + i;
            DefaultMQProducer p = new DefaultMQProducer(
                StockClient.opt("producer_group", "chaos-producer"), StockClient.hook());
            p.setNamesrvAddr(StockClient.opt("namesrv", "127.0.0.1:9876"));
            StockClient.deadlines(p);
            p.setInstanceName("chaos-" + client + "-" + ProcessHandle.current().pid());
            p.setSendMsgTimeout(StockClient.intOpt("send_timeout_ms", 3000));
            p.start();
            Thread t = new Thread(() -> {
                long seq = 0;
                while (!Files.exists(stop)) {
                    String key = client + "-" + seq;
                    Message m = new Message(topic, body(key));
                    m.setKeys(key);
                    long invoke = System.currentTimeMillis();
                    String outcome, detail, where = "";
                    try {
                        SendResult r = p.send(m);
                        outcome = r.getSendStatus() == SendStatus.SEND_OK ? "ok" : "indeterminate";
                        detail = r.getSendStatus().name();
                        where = ",\"queueId\":" + r.getMessageQueue().getQueueId() + ",\"queueOffset\":" + r.getQueueOffset();
                    } catch (MQClientException e) {
                        // No route: the client never sent it. Anything else may have reached a broker.
                        String text = String.valueOf(e.getMessage());
                        outcome = text.contains("No route info") ? "failed" : "indeterminate";
                        detail = e.getClass().getSimpleName() + ": " + text.split("\n")[0];
                    } catch (Exception e) {
                        outcome = "indeterminate";
                        detail = e.getClass().getSimpleName() + ": " + String.valueOf(e.getMessage()).split("\n")[0];
                    }
                    long complete = System.currentTimeMillis();
                    String line = "{\"client\":" + StockClient.q(client) + ",\"seq\":" + seq + ",\"key\":" + StockClient.q(key)
                        + ",\"invokeMs\":" + invoke + ",\"completeMs\":" + complete + ",\"outcome\":" + StockClient.q(outcome)
                        + ",\"detail\":" + StockClient.q(detail.length() > 200 ? detail.substring(0, 200) : detail)
                        + ",\"bodyCrc\":" + crc(m.getBody()) + where + "}\n";
                    synchronized (sends) {
                        try {
                            sends.append(line);
                            sends.flush();
                        } catch (java.io.IOException e) {
                            throw new RuntimeException(e);
                        }
                    }
                    sent.incrementAndGet();
                    if (outcome.equals("ok")) acked.incrementAndGet();
                    seq++;
                    try {
                        Thread.sleep(outcome.equals("ok") ? pauseMs : Math.max(pauseMs, 50));
                    } catch (InterruptedException e) {
                        break;
                    }
                }
                p.shutdown();
            }, "chaos-" + client);
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) t.join();
        // Let the consumer catch up for a moment (the runner reads the stores from disk anyway).
        Thread.sleep(StockClient.intOpt("drain_ms", 2000));
        consumer.shutdown();
        synchronized (receives) {
            receives.close();
        }
        sends.close();
        StockClient.OUT.println("{\"summary\":\"chaosWorkload\",\"sent\":" + sent.get() + ",\"acked\":" + acked.get()
            + ",\"received\":" + received.get() + "}");
    }
}
