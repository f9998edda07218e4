import java.lang.management.ManagementFactory;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;

/**
 * A fresh stock RocketMQ 5.3.1 client's route lookups (bench/namesrv_route.py): args
 * namesrv topic ak sk warm [prewarm]. Prints one JSON line: ms from JVM start to main, producer start,
 * the first route lookup (MQAdminImpl.fetchPublishMessageQueues always asks the name server,
 * so it includes the client's connect), whether it found a route, and each of `warm` further
 * lookups on that connection. A topic with no route is looked up the same way (the name
 * server answers TOPIC_NOT_EXIST): the same client work against any name server. `prewarm`
 * first runs the client-side cold paths that need no server (prewarmMs), so the first
 * lookup then costs the connect, the round trip and what is left of the cold start.
 */
public class RouteProbe {
    public static void main(String[] args) throws Exception {
        long jvmStart = ManagementFactory.getRuntimeMXBean().getStartTime();
        long mainAt = System.currentTimeMillis();
        String namesrv = args[0], topic = args[1], ak = args[2], sk = args[3];
        int warm = Integer.parseInt(args[4]);
        boolean prewarm = args.length > 5 && args[5].equals("prewarm");
        long w0 = System.nanoTime();
        if (prewarm) {
            prewarm(ak, sk);
        }
        long w1 = System.nanoTime();
        DefaultMQProducer p = new DefaultMQProducer("RouteProbe",
            new AclClientRPCHook(new SessionCredentials(ak, sk)));
        p.setNamesrvAddr(namesrv);
        p.setInstanceName("RouteProbe" + ProcessHandle.current().pid());
        long t0 = System.nanoTime();
        p.start();
        long t1 = System.nanoTime();
        boolean found = lookup(p, topic);
        long t2 = System.nanoTime();
        StringBuilder w = new StringBuilder();
        for (int i = 0; i < warm; i++) {
            long a = System.nanoTime();
            lookup(p, topic);
            w.append(i == 0 ? "" : ",").append((System.nanoTime() - a) / 1e6);
        }
        p.shutdown();
        System.out.println("{\"jvmToMainMs\":" + (mainAt - jvmStart)
            + ",\"startMs\":" + (t1 - t0) / 1e6
            + ",\"firstLookupMs\":" + (t2 - t1) / 1e6
            + ",\"firstFound\":" + found
            + ",\"prewarmMs\":" + (w1 - w0) / 1e6
            + ",\"warmMs\":[" + w + "]}");
        System.exit(0);
    }

    /** The client-side cold paths of a first lookup that need no server: the ACL hook's
     * HmacSHA1 signature of a request, a request's encoding and a route's JSON decoding. */
    static void prewarm(String ak, String sk) throws Exception {
        RemotingCommand cmd = RemotingCommand.createRequestCommand(105, null);
        cmd.addExtField("topic", "T");
        new AclClientRPCHook(new SessionCredentials(ak, sk)).doBeforeRequest("127.0.0.1:1", cmd);
        cmd.fastEncodeHeader(io.netty.buffer.Unpooled.buffer());
        String json = "{\"brokerDatas\":[{\"brokerAddrs\":{\"0\":\"127.0.0.1:10911\"},"
            + "\"brokerName\":\"b\",\"cluster\":\"c\"}],\"filterServerTable\":{},"
            + "\"queueDatas\":[{\"brokerName\":\"b\",\"perm\":6,\"readQueueNums\":8,"
            + "\"topicSysFlag\":0,\"writeQueueNums\":8}]}";
        TopicRouteData.decode(json.getBytes(java.nio.charset.StandardCharsets.UTF_8),
            TopicRouteData.class);
    }

    /** One lookup; false when the name server has no route (TOPIC_NOT_EXIST, the client's
     * MQClientException): a full round trip all the same. */
    static boolean lookup(DefaultMQProducer p, String topic) {
        try {
            p.fetchPublishMessageQueues(topic);
            return true;
        } catch (Exception e) {
            return false;
        }
    }
}
