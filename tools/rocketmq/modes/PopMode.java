import java.io.BufferedWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.impl.consumer.RebalanceImpl;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Mode `pop`: topic=T group=G out=FILE stop=FILE size=N fail=ID,ID.. invisible_ms=MS threads=K.
 * A stock DefaultMQPushConsumer (concurrent, clustering) with setClientRebalance(false): it asks
 * the broker for its queues (QUERY_ASSIGNMENT) and, when the broker answers them in POP mode
 * (the group's mode set by `mqadmin setConsumeMode ... -m POP`), pops, acks and changes the
 * invisible time of what it consumes instead of pulling. A message whose body id is in `fail`
 * is answered RECONSUME_LATER on its first delivery (reconsumeTimes 0): the client changes its
 * invisible time (popDelayLevel[0], 10 s) and the broker revives it to the group's pop retry
 * topic with reconsumeTimes 1.
 *
 * One tab-separated line per delivery in `out`: receivedAtMs, body id, topic, queueId,
 * queueOffset, reconsumeTimes, body intact, has POP_CK (the receipt a pop gave it). Runs until
 * `stop` exists; the summary names the queues the consumer popped and those it pulled.
 */
public class PopMode {
    static void run() throws Exception {
        String topic = StockClient.opt("topic", "PopTopic"), group = StockClient.opt("group", "pop");
        int size = StockClient.intOpt("size", 1024);
        Path stop = Paths.get(StockClient.opt("stop", "/nonexistent-stop-file"));
        Set<String> fail = new HashSet<>(Arrays.asList(StockClient.opt("fail", "").split(",")));
        AtomicLong received = new AtomicLong();
        Set<String> popped = new TreeSet<>(), pulled = new TreeSet<>();
        try (BufferedWriter out = Files.newBufferedWriter(Paths.get(StockClient.opt("out", "pop.tsv")))) {
            DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, StockClient.hook(), new AllocateMessageQueueAveragely());
            c.setNamesrvAddr(StockClient.opt("namesrv", "127.0.0.1:9876"));
            StockClient.deadlines(c);
            c.setInstanceName("stock-pop-" + ProcessHandle.current().pid());
            c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            c.setClientRebalance(false);
            c.setPopInvisibleTime(StockClient.intOpt("invisible_ms", 60_000));
            int threads = StockClient.intOpt("threads", 1);
            c.setConsumeThreadMin(threads);
            c.setConsumeThreadMax(threads);
            c.subscribe(topic, "*");
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                long now = System.currentTimeMillis();
                boolean later = false;
                synchronized (out) {
                    try {
                        for (MessageExt m : msgs) {
                            String id = StockClient.bodyId(m.getBody());
                            boolean ok = Arrays.equals(m.getBody(), StockClient.body(id, size));
                            boolean ck = m.getProperty(MessageConst.PROPERTY_POP_CK) != null;
                            out.append(now + "\t" + id + "\t" + m.getTopic() + "\t" + m.getQueueId() + "\t"
                                + m.getQueueOffset() + "\t" + m.getReconsumeTimes() + "\t" + ok + "\t" + ck + "\n");
                            if (m.getReconsumeTimes() == 0 && fail.contains(id)) later = true;
                        }
                        out.flush();
                    } catch (java.io.IOException e) {
                        return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                    }
                    received.addAndGet(msgs.size());
                }
                return later ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            RebalanceImpl rebalance = c.getDefaultMQPushConsumerImpl().getRebalanceImpl();
            try {
                while (!Files.exists(stop)) {
                    Thread.sleep(200);
                    for (MessageQueue mq : rebalance.getPopProcessQueueTable().keySet()) popped.add(mq.toString());
                    for (MessageQueue mq : rebalance.getProcessQueueTable().keySet()) {
                        if (mq.getTopic().equals(topic)) pulled.add(mq.toString());
                    }
                }
            } finally {
                c.shutdown();
            }
        }
        StringBuilder s = new StringBuilder("{\"summary\":\"pop\",\"received\":" + received.get() + ",\"popQueues\":[");
        int i = 0;
        for (String q : popped) s.append(i++ > 0 ? "," : "").append(StockClient.q(q));
        s.append("],\"pullQueues\":[");
        i = 0;
        for (String q : pulled) s.append(i++ > 0 ? "," : "").append(StockClient.q(q));
        StockClient.OUT.println(s.append("]}"));
    }
}
