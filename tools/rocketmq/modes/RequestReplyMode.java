import java.nio.charset.StandardCharsets;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.RequestCallback;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Mode `requestReply`: topic=T group=G count=N timeout_ms=MS. A responder (a push consumer of
 * T that answers every request with MessageUtil.createReplyMessage, body "reply:" + the
 * request's body, sent by its own producer) and a requester (DefaultMQProducer.request with a
 * RequestCallback, one request at a time: the 5.3.1 client's synchronous request() returns
 * at once, its send callback counting the reply latch down, fixed upstream by #9608). A first ordinary message makes the topic and is waited for, so the responder
 * is subscribed before the requests. One line per request: {"request":body,"reply":body or
 * null,"error":..}; a line per reply the responder could not send {"replyError":..}.
 */
public class RequestReplyMode {
    static void run() throws Exception {
        String topic = StockClient.opt("topic", "RequestTopic"), group = StockClient.opt("group", "rr");
        int count = StockClient.intOpt("count", 3), timeoutMs = StockClient.intOpt("timeout_ms", 15000);
        String namesrv = StockClient.opt("namesrv", "127.0.0.1:9876");
        DefaultMQProducer requester = StockClient.producer("-requester");
        DefaultMQProducer replier = StockClient.producer("-replier");
        AtomicInteger warm = new AtomicInteger(), sent = new AtomicInteger();
        DefaultMQPushConsumer responder = new DefaultMQPushConsumer(group + "-responder", StockClient.hook(),
            new AllocateMessageQueueAveragely());
        responder.setNamesrvAddr(namesrv);
        StockClient.deadlines(responder);
        responder.setInstanceName("rr-responder-" + ProcessHandle.current().pid());
        responder.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        responder.subscribe(topic, "*");
        responder.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                if (body.equals("warm")) {
                    warm.incrementAndGet();
                    continue;
                }
                try {
                    Message reply = MessageUtil.createReplyMessage(m, ("reply:" + body).getBytes(StandardCharsets.UTF_8));
                    replier.send(reply);
                    sent.incrementAndGet();
                } catch (Exception e) {
                    synchronized (StockClient.OUT) {
                        StockClient.OUT.println("{\"replyError\":" + StockClient.q(e.toString()) + "}");
                    }
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        requester.send(new Message(topic, "warm".getBytes(StandardCharsets.UTF_8)));
        responder.start();
        long deadline = System.currentTimeMillis() + 120_000;
        while (warm.get() == 0 && System.currentTimeMillis() < deadline) Thread.sleep(100);
        int ok = 0;
        for (int i = 0; i < count; i++) {
            String body = "request-" + i;
            String reply = null, error = null;
            long started = System.nanoTime();
            CompletableFuture<Message> answer = new CompletableFuture<>();
            try {
                requester.request(new Message(topic, body.getBytes(StandardCharsets.UTF_8)), new RequestCallback() {
                    @Override
                    public void onSuccess(Message m) {
                        // 5.3.1 calls this once with null when the request is sent (its
                        // synchronous request() returns at once for the same reason; fixed
                        // upstream by #9608), and again with the reply when it arrives.
                        if (m != null) answer.complete(m);
                    }

                    @Override
                    public void onException(Throwable e) {
                        answer.completeExceptionally(e);
                    }
                }, timeoutMs);
                Message m = answer.get(timeoutMs + 5000L, TimeUnit.MILLISECONDS);
                reply = new String(m.getBody(), StandardCharsets.UTF_8);
                ok++;
            } catch (ExecutionException e) {
                error = e.getCause().toString();
            } catch (Exception e) {
                error = e.toString();
            }
            synchronized (StockClient.OUT) {
                StockClient.OUT.println("{\"request\":" + StockClient.q(body) + ",\"reply\":" + StockClient.q(reply)
                    + ",\"error\":" + StockClient.q(error) + ",\"ms\":" + (System.nanoTime() - started) / 1_000_000 + "}");
            }
        }
        // A reply reaches the requester before the responder's send returns (pushed, then
        // stored): let those sends end before the responder stops.
        long sendsEnd = System.currentTimeMillis() + 10_000;
        while (sent.get() < ok && System.currentTimeMillis() < sendsEnd) Thread.sleep(50);
        responder.shutdown();
        requester.shutdown();
        replier.shutdown();
        StockClient.OUT.println("{\"summary\":\"requestReply\",\"warm\":" + warm.get() + ",\"replied\":" + ok + "}");
    }
}
