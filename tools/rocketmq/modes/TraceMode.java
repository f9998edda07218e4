import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Mode `trace`: a producer and a push consumer, both with enableMsgTrace (the default trace
 * topic RMQ_SYS_TRACE_TOPIC), topic=T group=G count=N idle_s=S. Sends N messages (key
 * "trace-key-i"), consumes them, then shuts both down so their trace dispatchers flush. One
 * line per send {"sent":msgId,"key":..} and per delivery {"received":msgId,"traceOn":..,
 * "region":..}; the summary counts both.
 */
public class TraceMode {
    static void run() throws Exception {
        String topic = StockClient.opt("topic", "TraceTopic"), group = StockClient.opt("group", "trace");
        int count = StockClient.intOpt("count", 3);
        long idleMs = StockClient.intOpt("idle_s", 60) * 1000L;
        String namesrv = StockClient.opt("namesrv", "127.0.0.1:9876");
        DefaultMQProducer producer = new DefaultMQProducer(group + "-producer", StockClient.hook(), true, null);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("trace-producer-" + ProcessHandle.current().pid());
        producer.start();
        List<String> lines = new ArrayList<>();
        Set<String> sent = ConcurrentHashMap.newKeySet();
        for (int i = 0; i < count; i++) {
            Message m = new Message(topic, "traced", "trace-key-" + i, ("trace-body-" + i).getBytes(StandardCharsets.UTF_8));
            SendResult r = producer.send(m);
            sent.add(r.getMsgId());
            lines.add("{\"sent\":" + StockClient.q(r.getMsgId()) + ",\"key\":" + StockClient.q("trace-key-" + i)
                + ",\"status\":" + StockClient.q(r.getSendStatus().name()) + "}");
        }
        Set<String> got = ConcurrentHashMap.newKeySet();
        List<String> received = new ArrayList<>();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group + "-consumer", StockClient.hook(),
            new AllocateMessageQueueAveragely(), true, null);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("trace-consumer-" + ProcessHandle.current().pid());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            synchronized (received) {
                for (MessageExt m : msgs) {
                    got.add(m.getMsgId());
                    received.add("{\"received\":" + StockClient.q(m.getMsgId()) + ",\"traceOn\":"
                        + StockClient.q(m.getProperty("TRACE_ON")) + ",\"region\":"
                        + StockClient.q(m.getProperty("MSG_REGION")) + ",\"cluster\":"
                        + StockClient.q(m.getProperty("CLUSTER")) + "}");
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        long deadline = System.currentTimeMillis() + idleMs;
        while (!got.containsAll(sent) && System.currentTimeMillis() < deadline) Thread.sleep(100);
        Thread.sleep(2000);  // the consume hook's SubAfter is appended after the listener returns
        consumer.shutdown();  // flushes the consumer's traces
        producer.shutdown();  // and the producer's
        for (String l : lines) StockClient.OUT.println(l);
        synchronized (received) {
            for (String l : received) StockClient.OUT.println(l);
        }
        StockClient.OUT.println("{\"summary\":\"trace\",\"sent\":" + sent.size() + ",\"received\":" + got.size() + "}");
    }
}
