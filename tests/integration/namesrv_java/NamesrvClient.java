// A stock RocketMQ 5.3.1 producer and consumer that find their broker through a name server
// (tests/integration/test_namesrv_stock.py compiles and runs it against the jars
// tools/rocketmq/fetch.sh caches). Both sign every request with AclClientRPCHook.
//
//   produce NAMESRV AK SK TOPIC COUNT         one line "SEND_OK <queueId> <body>" per message
//   consume NAMESRV AK SK TOPIC GROUP COUNT TIMEOUT_MS
//                                             one line "RECEIVED <body>" per message
// Exit status 0 when every message was sent (received), else 1 with the error on stderr.

import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class NamesrvClient {
    public static void main(String[] args) throws Exception {
        AclClientRPCHook hook = new AclClientRPCHook(new SessionCredentials(args[2], args[3]));
        int status = args[0].equals("produce") ? produce(args, hook) : consume(args, hook);
        System.out.flush();
        System.exit(status);
    }

    static int produce(String[] args, AclClientRPCHook hook) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("namesrv-test-producer", hook);
        producer.setNamesrvAddr(args[1]);
        producer.setInstanceName("namesrv-test-" + System.nanoTime());
        producer.start();
        try {
            int count = Integer.parseInt(args[5]);
            for (int i = 0; i < count; i++) {
                String body = "message-" + i;
                SendResult result =
                    producer.send(new Message(args[4], "TagA", body.getBytes(StandardCharsets.UTF_8)));
                if (result.getSendStatus() != SendStatus.SEND_OK) {
                    System.err.println("send " + i + ": " + result);
                    return 1;
                }
                System.out.println("SEND_OK " + result.getMessageQueue().getQueueId() + " " + body);
            }
            return 0;
        } catch (Exception e) {
            e.printStackTrace();
            return 1;
        } finally {
            producer.shutdown();
        }
    }

    static int consume(String[] args, AclClientRPCHook hook) throws Exception {
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(args[5], hook);
        consumer.setNamesrvAddr(args[1]);
        consumer.setInstanceName("namesrv-test-" + System.nanoTime());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(args[4], "*");
        consumer.start();
        try {
            int count = Integer.parseInt(args[6]);
            long deadline = System.currentTimeMillis() + Long.parseLong(args[7]);
            int received = 0;
            while (received < count && System.currentTimeMillis() < deadline) {
                List<MessageExt> messages = consumer.poll(1000);
                for (MessageExt m : messages) {
                    System.out.println("RECEIVED " + new String(m.getBody(), StandardCharsets.UTF_8));
                    received++;
                }
            }
            if (received < count) {
                System.err.println("received " + received + " of " + count);
                return 1;
            }
            return 0;
        } finally {
            consumer.shutdown();
        }
    }
}
