import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.body.KVTable;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;

/**
 * Mode `filter`: topic=T count=N size=S idle_s=I. Server-side filters with the stock
 * client: a push consumer with MessageSelector.byTag("TagA || TagC") (group T-tag) and one
 * with MessageSelector.bySql("a BETWEEN 3 AND 7 AND b = 'x'") (group T-sql), both from the
 * first offset with one consume thread (deliveries in queue order). N messages are sent,
 * message i with tag Tag{A,B,C,D}[i % 4], properties a = i % 10 and b = (i % 3 == 0 ? x : y),
 * body StockClient.body("f-i", S). A line per delivery {"consumer":"tag"|"sql","id":..,
 * "intact":..,"queueId":..,"queueOffset":..}; a consumer that cannot start (a SQL92 one on a
 * broker without CHECK_CLIENT_CONFIG) prints {"startError":..}. Ends when both have their
 * expected count or after idle_s without a delivery; the summary carries the master's
 * msgGetTotalTodayNow (GET_BROKER_RUNTIME_INFO: messages the broker sent to consumers).
 */
public class FilterMode {
    static final String[] TAGS = {"TagA", "TagB", "TagC", "TagD"};

    static DefaultMQPushConsumer consumer(String group, String name, MessageSelector selector,
                                          String topic, List<String> lines, long[] last) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, StockClient.hook(), new AllocateMessageQueueAveragely());
        c.setNamesrvAddr(StockClient.opt("namesrv", "127.0.0.1:9876"));
        StockClient.deadlines(c);
        c.setInstanceName("filter-" + name + "-" + ProcessHandle.current().pid());
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setConsumeThreadMin(1);
        c.setConsumeThreadMax(1);
        c.subscribe(topic, selector);
        int size = StockClient.intOpt("size", 256);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            synchronized (lines) {
                for (MessageExt m : msgs) {
                    String id = StockClient.bodyId(m.getBody());
                    boolean intact = Arrays.equals(m.getBody(), StockClient.body(id, size));
                    lines.add("{\"consumer\":" + StockClient.q(name) + ",\"id\":" + StockClient.q(id)
                        + ",\"intact\":" + intact + ",\"tags\":" + StockClient.q(String.valueOf(m.getTags()))
                        + ",\"queueId\":" + m.getQueueId() + ",\"queueOffset\":" + m.getQueueOffset() + "}");
                }
                last[0] = System.currentTimeMillis();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        return c;
    }

    static void run() throws Exception {
        String topic = StockClient.opt("topic", "FilterTopic");
        int count = StockClient.intOpt("count", 200), size = StockClient.intOpt("size", 256);
        long idleMs = StockClient.intOpt("idle_s", 30) * 1000L;
        DefaultMQProducer p = StockClient.producer("");
        List<String> lines = new ArrayList<>();
        long[] last = {System.currentTimeMillis()};
        int wantTag = 0, wantSql = 0;
        for (int i = 0; i < count; i++) {
            String tag = TAGS[i % 4];
            int a = i % 10;
            String b = i % 3 == 0 ? "x" : "y";
            if (tag.equals("TagA") || tag.equals("TagC")) wantTag++;
            if (a >= 3 && a <= 7 && b.equals("x")) wantSql++;
            Message m = new Message(topic, tag, StockClient.body("f-" + i, size));
            m.putUserProperty("a", Integer.toString(a));
            m.putUserProperty("b", b);
            p.send(m);
        }
        List<DefaultMQPushConsumer> started = new ArrayList<>();
        started.add(consumer(topic + "-tag", "tag", MessageSelector.byTag("TagA || TagC"), topic, lines, last));
        boolean sqlStarted = false;
        try {
            started.add(consumer(topic + "-sql", "sql", MessageSelector.bySql("a BETWEEN 3 AND 7 AND b = 'x'"), topic, lines, last));
            sqlStarted = true;
        } catch (Exception e) {
            StockClient.OUT.println("{\"startError\":" + StockClient.q(String.valueOf(e.getMessage()).split("\n")[0]) + "}");
        }
        synchronized (lines) {
            last[0] = System.currentTimeMillis();
        }
        while (true) {
            long tag, sql, quiet;
            synchronized (lines) {
                tag = lines.stream().filter(l -> l.contains("\"consumer\":\"tag\"")).count();
                sql = lines.stream().filter(l -> l.contains("\"consumer\":\"sql\"")).count();
                quiet = System.currentTimeMillis() - last[0];
            }
            if ((tag >= wantTag && (sql >= wantSql || !sqlStarted)) || quiet > idleMs) break;
            Thread.sleep(100);
        }
        Thread.sleep(2000);  // a stray extra delivery would show in the lines
        for (DefaultMQPushConsumer c : started) c.shutdown();
        MQClientInstance factory = p.getDefaultMQProducerImpl().getMqClientFactory();
        TopicRouteData route = factory.getMQClientAPIImpl().getTopicRouteInfoFromNameServer(topic, 5000);
        String master = route.getBrokerDatas().get(0).selectBrokerAddr();
        KVTable info = factory.getMQClientAPIImpl().getBrokerRuntimeInfo(master, 5000);
        p.shutdown();
        synchronized (lines) {
            for (String l : lines) StockClient.OUT.println(l);
        }
        StockClient.OUT.println("{\"summary\":\"filter\",\"sent\":" + count + ",\"wantTag\":" + wantTag
            + ",\"wantSql\":" + wantSql + ",\"msgGetTotalTodayNow\":"
            + StockClient.q(info.getTable().get("msgGetTotalTodayNow")) + "}");
    }
}
