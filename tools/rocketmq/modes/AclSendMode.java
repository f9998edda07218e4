import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

/**
 * Mode `aclSend`: topic=T count=N [send_timeout_ms=3000] (ak/sk: the signer). N synchronous sends, each answered by a
 * line: {"ok":true,"body":..,"brokerName":..,"queueId":..,"queueOffset":..} or, when the
 * broker refuses, {"ok":false,"body":..,"code":<response code>,"remark":<its remark>} (the
 * send is not retried by the client for a refusal: retryAnotherBrokerWhenNotStoreOK off and
 * one try). Summary: {"summary":true,"ok":k,"refused":r}.
 */
public class AclSendMode {
    static void run() throws Exception {
        String topic = StockClient.opt("topic", "AclTopic"), run = StockClient.opt("run", "acl");
        int count = StockClient.intOpt("count", 8);
        DefaultMQProducer p = StockClient.producer("");
        p.setRetryTimesWhenSendFailed(0);
        // send_timeout_ms: the client's own budget per send (RocketMQ's 3 s by default).
        p.setSendMsgTimeout(StockClient.intOpt("send_timeout_ms", 3000));
        int ok = 0, refused = 0;
        try {
            for (int i = 0; i < count; i++) {
                String body = run + "-" + i;
                Message m = new Message(topic, body.getBytes(StandardCharsets.UTF_8));
                try {
                    SendResult r = p.send(m);
                    ok++;
                    StockClient.OUT.println("{\"ok\":true,\"body\":" + StockClient.q(body) + ",\"brokerName\":"
                        + StockClient.q(r.getMessageQueue().getBrokerName()) + ",\"queueId\":"
                        + r.getMessageQueue().getQueueId() + ",\"queueOffset\":" + r.getQueueOffset() + "}");
                } catch (MQBrokerException e) {
                    refused++;
                    StockClient.OUT.println("{\"ok\":false,\"body\":" + StockClient.q(body) + ",\"code\":"
                        + e.getResponseCode() + ",\"remark\":" + StockClient.q(e.getErrorMessage()) + "}");
                } catch (MQClientException e) {
                    // The producer wraps the broker's refusal ("Send [1] times, still failed"):
                    // report the broker's own code and remark, its cause.
                    refused++;
                    int code = e.getResponseCode();
                    String remark = e.getErrorMessage();
                    if (e.getCause() instanceof MQBrokerException) {
                        MQBrokerException cause = (MQBrokerException) e.getCause();
                        code = cause.getResponseCode();
                        remark = cause.getErrorMessage();
                    }
                    StockClient.OUT.println("{\"ok\":false,\"body\":" + StockClient.q(body) + ",\"code\":"
                        + code + ",\"remark\":" + StockClient.q(remark) + "}");
                }
            }
        } finally {
            p.shutdown();
        }
        StockClient.OUT.println("{\"summary\":true,\"ok\":" + ok + ",\"refused\":" + refused + "}");
    }
}
