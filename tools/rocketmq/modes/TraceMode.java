import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadPoolExecutor;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.client.trace.AsyncTraceDispatcher;
import org.apache.rocketmq.client.trace.TraceDispatcher;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Mode `trace`: a producer and a push consumer, both with enableMsgTrace (the default trace
 * topic RMQ_SYS_TRACE_TOPIC), topic=T group=G count=N idle_s=S. Sends N messages (key
 * "trace-key-i"), consumes them, waits until both trace dispatchers have sent what they hold,
 * then shuts both down. One line per send {"sent":msgId,"key":..}, per delivery
 * {"received":msgId,"traceOn":..,"region":..} and per dispatcher {"traceDrained":who,"ok":..};
 * the summary counts sends and deliveries.
 *
 * Why the wait: the 5.3.1 client's AsyncTraceDispatcher sends its queued traces only when
 * traceMsgBatchNum (10) are queued or 5 s (flushTraceInterval) after its last flush, and its
 * shutdown() submits the last flush to its send threads without waiting for them before it
 * shuts the trace producer down, so a client that stops within 5 s of its last message loses
 * those traces to "executor rejected" (apache/rocketmq#9377, fixed in 5.3.3). A stock
 * RocketMQ broker loses them the same way: it is the client's race, not the broker's.
 */
public class TraceMode {
    static void run() throws Exception {
        String topic = StockClient.opt("topic", "TraceTopic"), group = StockClient.opt("group", "trace");
        int count = StockClient.intOpt("count", 3);
        long idleMs = StockClient.intOpt("idle_s", 60) * 1000L;
        String namesrv = StockClient.opt("namesrv", "127.0.0.1:9876");
        DefaultMQProducer producer = new DefaultMQProducer(group + "-producer", StockClient.hook(), true, null);
        producer.setNamesrvAddr(namesrv);
        StockClient.deadlines(producer);
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
        StockClient.deadlines(consumer);
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
        Thread.sleep(1000);  // the consume hook's SubAfter is appended after the listener returns
        long drainDeadline = System.currentTimeMillis() + StockClient.intOpt("drain_s", 60) * 1000L;
        boolean consumerDrained = drained(consumer.getTraceDispatcher(), drainDeadline);
        boolean producerDrained = drained(producer.getTraceDispatcher(), drainDeadline);
        consumer.shutdown();
        producer.shutdown();
        for (String l : lines) StockClient.OUT.println(l);
        StockClient.OUT.println("{\"traceDrained\":\"consumer\",\"ok\":" + consumerDrained + "}");
        StockClient.OUT.println("{\"traceDrained\":\"producer\",\"ok\":" + producerDrained + "}");
        synchronized (received) {
            for (String l : received) StockClient.OUT.println(l);
        }
        StockClient.OUT.println("{\"summary\":\"trace\",\"sent\":" + sent.size() + ",\"received\":" + got.size() + "}");
    }

    /**
     * Waits (until the deadline) for a dispatcher's queue to be empty and its send threads and
     * its trace producer's async send threads to be idle: every trace handed to the broker.
     * The queue and the send pool are private fields of the 5.3.1 AsyncTraceDispatcher
     * (traceContextQueue, traceExecutor), read by reflection.
     */
    static boolean drained(TraceDispatcher dispatcher, long deadline) throws Exception {
        AsyncTraceDispatcher d = (AsyncTraceDispatcher) dispatcher;
        java.lang.reflect.Field q = AsyncTraceDispatcher.class.getDeclaredField("traceContextQueue");
        java.lang.reflect.Field e = AsyncTraceDispatcher.class.getDeclaredField("traceExecutor");
        q.setAccessible(true);
        e.setAccessible(true);
        java.util.Collection<?> queue = (java.util.Collection<?>) q.get(d);
        ThreadPoolExecutor sendPool = (ThreadPoolExecutor) e.get(d);
        java.util.concurrent.ExecutorService async = d.getTraceProducer().getDefaultMQProducerImpl().getAsyncSenderExecutor();
        int idleRounds = 0;
        while (System.currentTimeMillis() < deadline) {
            boolean asyncIdle = !(async instanceof ThreadPoolExecutor)
                || (((ThreadPoolExecutor) async).getActiveCount() == 0 && ((ThreadPoolExecutor) async).getQueue().isEmpty());
            boolean idle = queue.isEmpty() && sendPool.getActiveCount() == 0 && sendPool.getQueue().isEmpty() && asyncIdle;
            idleRounds = idle ? idleRounds + 1 : 0;
            if (idleRounds >= 10) return true;  // one second idle in a row
            Thread.sleep(100);
        }
        return false;
    }
}
