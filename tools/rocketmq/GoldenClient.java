// Golden frames from a stock RocketMQ client (tools/rocketmq/record_golden.py drives it).
//
//   java -cp LIB/*:CLASSES -Drocketmq.serialize.type=JSON|ROCKETMQ GoldenClient send HOST:PORT AK SK
//     A stock DefaultMQProducer (and the stock MQClientAPIImpl for a pull) talks to the Python
//     recorder at HOST:PORT, which plays both name server and broker: route lookup, a
//     SEND_MESSAGE_V2 with keys/tags/properties, a batch, a oneway send, a heartbeat, a pull,
//     then the same route + send from a producer with AclClientRPCHook(AK, SK).
//   java -cp LIB/*:CLASSES GoldenClient decode FILE...
//     Java's own RemotingCommand.decode of each recorded frame, one JSON line per file: the
//     independent oracle the Python codec's tests compare against.
//
// Only stock classes build and encode the requests; this file just calls them.

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.serializer.SerializerFeature;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.impl.CommunicationMode;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.header.PullMessageRequestHeader;

public class GoldenClient {
    static final String TOPIC = "GoldenTopic";

    public static void main(String[] args) throws Exception {
        if (args.length >= 1 && args[0].equals("decode")) {
            for (int i = 1; i < args.length; i++) {
                decode(args[i]);
            }
            return;
        }
        if (args.length == 4 && args[0].equals("send")) {
            send(args[1], args[2], args[3]);
            return;
        }
        System.err.println("usage: GoldenClient send HOST:PORT AK SK | decode FILE...");
        System.exit(2);
    }

    static Message message(String tags, String keys, String body) {
        Message msg = new Message(TOPIC, tags, keys, body.getBytes(StandardCharsets.UTF_8));
        msg.putUserProperty("color", "blue");
        // Characters a JSON writer must escape, and non-ASCII ones it must not.
        msg.putUserProperty("note", "tab\there \"quoted\" back\\slash é ✓");
        return msg;
    }

    static DefaultMQProducer producer(String group, String addr, SessionCredentials credentials) throws Exception {
        DefaultMQProducer producer = credentials == null
            ? new DefaultMQProducer(group)
            : new DefaultMQProducer(group, new AclClientRPCHook(credentials));
        producer.setNamesrvAddr(addr);
        producer.setInstanceName(group);
        producer.setRetryTimesWhenSendFailed(0);
        producer.setSendMsgTimeout(5000);
        producer.start();
        return producer;
    }

    static void step(String name, Step step) {
        try {
            Object result = step.run();
            System.out.println("step " + name + ": " + result);
        } catch (Exception e) {
            System.out.println("step " + name + " failed: " + e);
        }
    }

    interface Step {
        Object run() throws Exception;
    }

    static void send(String addr, String accessKey, String secretKey) throws Exception {
        DefaultMQProducer producer = producer("golden_producer", addr, null);
        step("send", () -> producer.send(message("TagA", "KEY-1 KEY-2", "hello, golden frame")));
        step("batch", () -> {
            List<Message> batch = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                Message m = new Message(TOPIC, "TagB", "BATCH-" + i, ("batch body " + i).getBytes(StandardCharsets.UTF_8));
                m.putUserProperty("index", Integer.toString(i));
                batch.add(m);
            }
            return producer.send(batch);
        });
        step("oneway", () -> {
            producer.sendOneway(message("TagC", "ONEWAY-1", "oneway body"));
            return "sent";
        });
        MQClientInstance factory = producer.getDefaultMQProducerImpl().getMqClientFactory();
        step("heartbeat", () -> factory.sendHeartbeatToAllBrokerWithLock());
        step("pull", () -> {
            PullMessageRequestHeader header = new PullMessageRequestHeader();
            header.setConsumerGroup("golden_consumer");
            header.setTopic(TOPIC);
            header.setQueueId(0);
            header.setQueueOffset(5L);
            header.setMaxMsgNums(32);
            header.setSysFlag(2);
            header.setCommitOffset(0L);
            header.setSuspendTimeoutMillis(15000L);
            header.setSubscription("TagA || TagB");
            header.setSubVersion(1700000000000L);
            header.setExpressionType("TAG");
            header.setBrokerName("golden-broker");
            return factory.getMQClientAPIImpl().pullMessage(addr, header, 5000, CommunicationMode.SYNC, null);
        });
        producer.shutdown();

        DefaultMQProducer signed = producer("golden_acl_producer", addr, new SessionCredentials(accessKey, secretKey));
        step("signed send", () -> signed.send(message("TagS", "SIGNED-1", "signed body")));
        signed.shutdown();
        System.out.println("client version " + MQVersion.getVersionDesc(MQVersion.CURRENT_VERSION)
            + " serialize type " + RemotingCommand.getSerializeTypeConfigInThisServer());
    }

    static void decode(String file) throws Exception {
        byte[] frame = Files.readAllBytes(Paths.get(file));
        // NettyDecoder strips the 4-byte total length before RemotingCommand.decode.
        RemotingCommand cmd = RemotingCommand.decode(ByteBuffer.wrap(frame, 4, frame.length - 4).slice());
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("file", Paths.get(file).getFileName().toString());
        out.put("serializeType", cmd.getSerializeTypeCurrentRPC().name());
        out.put("code", cmd.getCode());
        out.put("language", cmd.getLanguage() == null ? null : cmd.getLanguage().name());
        out.put("version", cmd.getVersion());
        out.put("opaque", cmd.getOpaque());
        out.put("flag", cmd.getFlag());
        out.put("remark", cmd.getRemark());
        out.put("extFields", cmd.getExtFields() == null ? null : new TreeMap<>(cmd.getExtFields()));
        byte[] body = cmd.getBody();
        out.put("body", body == null ? "" : Base64.getEncoder().encodeToString(body));
        System.out.println(JSON.toJSONString(out, SerializerFeature.WriteMapNullValue));
    }
}
