import java.util.ArrayList;
import java.util.List;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

/**
 * Mode `batch`: topic=T count=N size=B [over_bytes=O]. One DefaultMQProducer.send(Collection)
 * of N messages of B bytes (bodies "<run>-i|xxx..."), then, with over_bytes, one batch of
 * whole-MiB messages whose bodies add up to at least O bytes, sent by a producer whose
 * maxMessageSize is raised above it so the client does not refuse it itself: the broker's
 * answer is printed. Lines: {"batch":"ok","status":..,"queueId":..,"queueOffset":..,
 * "msgIds":k} and {"batch":"over","bytes":..,"code":..,"error":..}.
 */
public class BatchMode {
    static void run() throws Exception {
        String topic = StockClient.opt("topic", "BatchTopic"), run = StockClient.opt("run", "b");
        int count = StockClient.intOpt("count", 5000), size = StockClient.intOpt("size", 32);
        int over = StockClient.intOpt("over_bytes", 0);
        DefaultMQProducer p = StockClient.producer("");
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < count; i++) batch.add(new Message(topic, StockClient.body(run + "-" + i, size)));
        // One request of 5,000 messages waits for its replicated, fsynced store: more than the
        // default 3 s on a loaded machine.
        p.setSendMsgTimeout(StockClient.intOpt("send_timeout_ms", 30_000));
        SendResult r;
        try {
            r = p.send(batch);
        } catch (Exception e) {
            // Answered, not thrown: a mode that throws leaves the client's threads running.
            StockClient.OUT.println("{\"batch\":\"failed\",\"error\":" + StockClient.q(e.toString()) + "}");
            p.shutdown();
            StockClient.OUT.println("{\"summary\":\"batch\",\"sent\":0}");
            return;
        }
        StockClient.OUT.println("{\"batch\":\"ok\",\"status\":" + StockClient.q(r.getSendStatus().name())
            + ",\"queueId\":" + r.getMessageQueue().getQueueId() + ",\"queueOffset\":" + r.getQueueOffset()
            + ",\"msgIds\":" + r.getMsgId().split(",").length + "}");
        StockClient.OUT.flush();  // a hung oversized send still shows how far it got
        String outcome = "{\"summary\":\"batch\",\"sent\":" + count;
        if (over > 0) {
            p.setMaxMessageSize(over + (4 << 20));  // the client sends it; the broker decides
            p.setRetryTimesWhenSendFailed(0);
            List<Message> big = new ArrayList<>();
            int total = 0;
            for (int i = 0; total < over; i++) {
                big.add(new Message(topic, StockClient.body(run + "-big-" + i, 1 << 20)));
                total += 1 << 20;
            }
            Integer code = null;
            String error = null;
            try {
                p.send(big);
            } catch (MQBrokerException e) {
                code = e.getResponseCode();
                error = e.getErrorMessage();
            } catch (Exception e) {
                error = e.toString();
            }
            StockClient.OUT.println("{\"batch\":\"over\",\"bytes\":" + total + ",\"code\":" + code
                + ",\"error\":" + StockClient.q(error) + "}");
        }
        p.shutdown();
        StockClient.OUT.println(outcome + "}");
    }
}
