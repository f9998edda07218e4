import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.heartbeat.MessageModel;

/**
 * Mode `broadcast`: topic=T group=G consumers=K count=N idle_s=S. K push consumers of one
 * group in MessageModel.BROADCASTING (each its own client instance, offsets kept by the
 * client), subscribed once a first message ("warm") reached every one of them; then N sends.
 * Each consumer must get every message: a line per delivery {"consumer":k,"body":..,
 * "queueId":..,"queueOffset":..}; stops once each has N or after idle_s without one.
 */
public class BroadcastMode {
    static void run() throws Exception {
        String topic = StockClient.opt("topic", "BroadcastTopic"), group = StockClient.opt("group", "broadcast");
        int consumers = StockClient.intOpt("consumers", 2), count = StockClient.intOpt("count", 20);
        long idleMs = StockClient.intOpt("idle_s", 60) * 1000L;
        String namesrv = StockClient.opt("namesrv", "127.0.0.1:9876");
        DefaultMQProducer p = StockClient.producer("");
        p.send(new Message(topic, "warm".getBytes(StandardCharsets.UTF_8)));
        List<Map<String, String>> got = new ArrayList<>();
        List<DefaultMQPushConsumer> started = new ArrayList<>();
        List<String> lines = new ArrayList<>();
        long[] last = {System.currentTimeMillis()};
        for (int k = 0; k < consumers; k++) {
            final int id = k;
            Map<String, String> mine = new ConcurrentHashMap<>();
            got.add(mine);
            DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, StockClient.hook(), new AllocateMessageQueueAveragely());
            c.setNamesrvAddr(namesrv);
            StockClient.deadlines(c);
            c.setInstanceName("broadcast-" + ProcessHandle.current().pid() + "-" + k);
            c.setMessageModel(MessageModel.BROADCASTING);
            c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            c.subscribe(topic, "*");
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                synchronized (lines) {
                    for (MessageExt m : msgs) {
                        String body = new String(m.getBody(), StandardCharsets.UTF_8);
                        mine.put(body, "");
                        lines.add("{\"consumer\":" + id + ",\"body\":" + StockClient.q(body) + ",\"queueId\":"
                            + m.getQueueId() + ",\"queueOffset\":" + m.getQueueOffset() + "}");
                    }
                    last[0] = System.currentTimeMillis();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            started.add(c);
        }
        long deadline = System.currentTimeMillis() + 120_000;
        while (System.currentTimeMillis() < deadline && got.stream().anyMatch(m -> !m.containsKey("warm"))) Thread.sleep(100);
        for (int i = 0; i < count; i++) p.send(new Message(topic, ("broadcast-" + i).getBytes(StandardCharsets.UTF_8)));
        synchronized (lines) {
            last[0] = System.currentTimeMillis();
        }
        while (true) {
            boolean all = got.stream().allMatch(m -> m.size() >= count + 1);
            long quiet;
            synchronized (lines) {
                quiet = System.currentTimeMillis() - last[0];
            }
            if (all || quiet > idleMs) break;
            Thread.sleep(100);
        }
        for (DefaultMQPushConsumer c : started) c.shutdown();
        p.shutdown();
        synchronized (lines) {
            for (String l : lines) StockClient.OUT.println(l);
        }
        StringBuilder counts = new StringBuilder("[");
        for (Map<String, String> m : got) counts.append(counts.length() > 1 ? "," : "").append(m.size());
        StockClient.OUT.println("{\"summary\":\"broadcast\",\"received\":" + counts + "]}");
    }
}
