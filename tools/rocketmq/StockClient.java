import java.io.BufferedWriter;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * One stock-client program (rocketmq-client 5.3.x, default settings unless an option says
 * otherwise) for tests/integration/test_stock_client_*.py and bench/rocketmq_client.py.
 *
 *   java -cp classes:lib/* StockClient MODE key=value...
 *
 * Common options: namesrv=HOST:PORT[;...] topic=T group=G ak=.. sk=.. (AclClientRPCHook when
 * ak is given). Further modes live one per file in tools/rocketmq/modes/<Name>Mode.java (a
 * class with `static void run()`, reading StockClient.opt); mode `name` runs <Name>Mode.
 * Modes (one JSON object per line on stdout, a summary object last):
 *   send      kind=sync|async|oneway|batch count=N run=ID   one line per message sent
 *   consume   kind=concurrent|orderly|lite count=N idle_s=S [from=first|last] [commit=true]
 *             one line per message received; stops after count or idle_s without a message
 *   retry     count=N max_reconsume=R idle_s=S   a push consumer that always answers
 *             RECONSUME_LATER (one line per delivery), so messages go to %RETRY% and %DLQ%
 *   load      threads=N batch=B seconds=S warmup_s=W acks=FILE size=1024 run=ID
 *             msg/s and p99 of send calls; every SEND_OK msgId/queue/offset to acks;
 *             {"event":"measuring"} and {"event":"measured"} (flushed) when the measured
 *             window (after warmup_s, for seconds) starts and ends
 *   failover  seconds=S acks=FILE log=FILE   one thread of sync sends; a line per result
 *             (ok/err with currentTimeMillis), flushed, so the driver sees SEND_OK after a kill
 *   verify    acks=FILE[,FILE...] idle_s=S [consumer=lite|push] [place=true]   a new group from the first offset
 *             reads the topic; every acked message must come back with its body
 *   follow    out=FILE stop=FILE [group=G]   a push consumer (concurrent, from the first offset)
 *             that runs until the stop file exists, appending "receivedAtMs\tbodyId\tqueueId\t
 *             queueOffset\tbodyOk" per delivery to out (flushed once a second)
 *   delayed   kind=level|deliver|sec|ms acks=FILE [count=N] [rate=R] [level=L] [delay_ms=D]
 *             [spread_ms=S] [stop=FILE] [size=1024] [run=ID]   sync sends of scheduled messages
 *             (setDelayTimeLevel, setDeliverTimeMs, setDelayTimeSec, setDelayTimeMs; the delay
 *             is delay_ms + i*spread_ms/count, or + (i%100)*spread_ms/100 without count) until
 *             count or the stop file, R a second at most (kind=deliver with at_ms=T: message i is
 *             due at T + i*spread_ms/count instead); a line per SEND_OK to acks: bodyId,
 *             msgId, sentAtMs (before the send), ackAtMs, the delay asked (ms; the level's
 *             number for kind=level) and deliverAtMs (kind=deliver, else -1), flushed
 *   backoff   out=FILE count=N until=R idle_s=S   a push consumer that answers RECONSUME_LATER
 *             until a message's reconsumeTimes reaches R, appending "receivedAtMs\tbodyId\t
 *             reconsumeTimes\ttopic" per delivery to out; stops once N messages reached R
 *
 * Ack lines, tab-separated: msgId, body id, brokerName, queueId, queueOffset; failover's add
 * offsetMsgId (the commit log offset the broker stored it at) and the ack's currentTimeMillis.
 */
public class StockClient {
    static final PrintStream OUT = System.out;
    static Map<String, String> opts = new HashMap<>();

    static String opt(String key, String dflt) {
        return opts.getOrDefault(key, dflt);
    }

    static int intOpt(String key, int dflt) {
        return Integer.parseInt(opt(key, Integer.toString(dflt)));
    }

    public static void main(String[] args) throws Exception {
        System.setProperty("rocketmq.client.logUseSlf4j", "false");
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq < 0) throw new IllegalArgumentException("option without '=': " + args[i]);
            opts.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        String mode = args.length > 0 ? args[0] : "";
        try {
            switch (mode) {
                case "send": send(); break;
                case "consume": consume(); break;
                case "retry": retry(); break;
                case "load": load(); break;
                case "failover": failover(); break;
                case "verify": verify(); break;
                case "follow": follow(); break;
                case "delayed": delayed(); break;
                case "backoff": backoff(); break;
                default: runModeClass(mode); break;
            }
        } catch (Throwable e) {
            // A mode that throws must still end the JVM: the client's threads (netty,
            // rebalance) are not daemons, and the caller would wait out its timeout.
            OUT.flush();
            e.printStackTrace();
            System.exit(1);
        }
        OUT.flush();
        System.exit(0);  // client threads (netty, rebalance) are not daemons
    }

    /** Mode `name` of a file tools/rocketmq/modes/<Name>Mode.java (stock_client.py compiles them). */
    static void runModeClass(String mode) throws Exception {
        if (mode.isEmpty()) throw new IllegalArgumentException("no mode given");
        String name = Character.toUpperCase(mode.charAt(0)) + mode.substring(1) + "Mode";
        Class<?> modeClass;
        try {
            modeClass = Class.forName(name);
        } catch (ClassNotFoundException e) {
            throw new IllegalArgumentException("unknown mode '" + mode + "'");
        }
        try {
            modeClass.getDeclaredMethod("run").invoke(null);
        } catch (java.lang.reflect.InvocationTargetException e) {
            Throwable cause = e.getCause();
            if (cause instanceof Exception) throw (Exception) cause;
            throw e;
        }
    }

    static RPCHook hook() {
        String ak = opt("ak", "");
        return ak.isEmpty() ? null : new AclClientRPCHook(new SessionCredentials(ak, opt("sk", "")));
    }

    /**
     * The client's deadlines where the caller gave them: `api_timeout_ms` (mqClientApiTimeout:
     * name-server and admin calls) and, for a producer, `send_timeout_ms` (sendMsgTimeout, the
     * whole send with its retries). RocketMQ's defaults (3 s each) otherwise.
     */
    static <T extends ClientConfig> T deadlines(T c) {
        String api = opt("api_timeout_ms", "");
        if (!api.isEmpty()) c.setMqClientApiTimeout(Integer.parseInt(api));
        String send = opt("send_timeout_ms", "");
        if (!send.isEmpty() && c instanceof DefaultMQProducer p) p.setSendMsgTimeout(Integer.parseInt(send));
        return c;
    }

    static DefaultMQProducer producer(String suffix) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(opt("group", "stock-client-producer") + suffix, hook());
        p.setNamesrvAddr(opt("namesrv", "127.0.0.1:9876"));
        deadlines(p);
        p.setInstanceName("stock-client-" + ProcessHandle.current().pid() + suffix);
        p.start();
        return p;
    }

    /** A body of `size` bytes that starts with its id, so a reader can rebuild and compare it. */
    static byte[] body(String id, int size) {
        byte[] head = (id + "|").getBytes(StandardCharsets.UTF_8);
        byte[] b = new byte[Math.max(size, head.length)];
        Arrays.fill(b, (byte) 'x');
        System.arraycopy(head, 0, b, 0, head.length);
        return b;
    }

    static String bodyId(byte[] body) {
        String s = new String(body, StandardCharsets.UTF_8);
        int bar = s.indexOf('|');
        return bar < 0 ? s : s.substring(0, bar);
    }

    static String q(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static String props(Map<String, String> m) {
        StringBuilder b = new StringBuilder("{");
        for (Map.Entry<String, String> e : new TreeMap<>(m).entrySet()) {
            if (b.length() > 1) b.append(',');
            b.append(q(e.getKey())).append(':').append(q(e.getValue()));
        }
        return b.append('}').toString();
    }

    /** The properties a user set (not the ones the client or broker add). */
    static Map<String, String> userProps(Message m) {
        Map<String, String> out = new HashMap<>();
        for (Map.Entry<String, String> e : m.getProperties().entrySet()) {
            if (!MessageConst.STRING_HASH_SET.contains(e.getKey())) out.put(e.getKey(), e.getValue());
        }
        return out;
    }

    static Message message(String topic, String id, int i, int size) {
        Message m = new Message(topic, "tag" + (i % 3), "key-" + id, body(id, size));
        m.putUserProperty("seq", Integer.toString(i));
        m.putUserProperty("run", opt("run", "r"));
        return m;
    }

    // ---- send ----------------------------------------------------------------------------

    static void send() throws Exception {
        String kind = opt("kind", "sync"), topic = opt("topic", "StockTopic"), run = opt("run", "r");
        int count = intOpt("count", 10), size = intOpt("size", 64);
        DefaultMQProducer p = producer("");
        List<Message> sent = new ArrayList<>();
        List<String> results = new ArrayList<>();
        int ok = 0;
        try {
            if (kind.equals("batch")) {
                for (int i = 0; i < count; i++) sent.add(message(topic, run + "-" + i, i, size));
                SendResult r = p.send((Collection<Message>) sent);
                String[] ids = r.getMsgId().split(",");
                for (int i = 0; i < sent.size(); i++) {
                    results.add(r.getSendStatus() + "\t" + ids[i] + "\t" + r.getMessageQueue().getQueueId()
                        + "\t" + (r.getQueueOffset() + i));
                }
                if (r.getSendStatus() == SendStatus.SEND_OK) ok = count;
            } else {
                CountDownLatch done = new CountDownLatch(kind.equals("async") ? count : 0);
                String[] asyncResults = new String[count];
                for (int i = 0; i < count; i++) {
                    Message m = message(topic, run + "-" + i, i, size);
                    sent.add(m);
                    final int idx = i;
                    if (kind.equals("sync")) {
                        SendResult r = p.send(m);
                        results.add(r.getSendStatus() + "\t" + r.getMsgId() + "\t"
                            + r.getMessageQueue().getQueueId() + "\t" + r.getQueueOffset());
                        if (r.getSendStatus() == SendStatus.SEND_OK) ok++;
                    } else if (kind.equals("async")) {
                        p.send(m, new SendCallback() {
                            public void onSuccess(SendResult r) {
                                asyncResults[idx] = r.getSendStatus() + "\t" + r.getMsgId() + "\t"
                                    + r.getMessageQueue().getQueueId() + "\t" + r.getQueueOffset();
                                done.countDown();
                            }
                            public void onException(Throwable e) {
                                asyncResults[idx] = "ERROR\t" + MessageClientIDSetter.getUniqID(m) + "\t-1\t-1\t" + e;
                                done.countDown();
                            }
                        });
                    } else if (kind.equals("oneway")) {
                        p.sendOneway(m);
                        results.add("ONEWAY\t" + MessageClientIDSetter.getUniqID(m) + "\t-1\t-1");
                    } else {
                        throw new IllegalArgumentException("unknown send kind '" + kind + "'");
                    }
                }
                if (kind.equals("async")) {
                    if (!done.await(60, TimeUnit.SECONDS)) throw new IllegalStateException("async sends unanswered after 60 s");
                    for (String r : asyncResults) {
                        results.add(r);
                        if (r.startsWith("SEND_OK")) ok++;
                    }
                }
            }
        } finally {
            p.shutdown();
        }
        for (int i = 0; i < sent.size(); i++) {
            Message m = sent.get(i);
            String[] r = results.get(i).split("\t");
            OUT.println("{\"status\":" + q(r[0]) + ",\"msgId\":" + q(r[1]) + ",\"queueId\":" + r[2]
                + ",\"queueOffset\":" + r[3] + ",\"topic\":" + q(m.getTopic()) + ",\"tags\":" + q(m.getTags())
                + ",\"keys\":" + q(m.getKeys()) + ",\"props\":" + props(userProps(m)) + ",\"body\":"
                + q(Base64.getEncoder().encodeToString(m.getBody())) + (r.length > 4 ? ",\"error\":" + q(r[4]) : "") + "}");
        }
        OUT.println("{\"summary\":\"send\",\"kind\":" + q(kind) + ",\"sent\":" + sent.size() + ",\"sendOk\":" + ok + "}");
    }

    // ---- consume -------------------------------------------------------------------------

    static String received(MessageExt m) {
        return "{\"msgId\":" + q(m.getMsgId()) + ",\"topic\":" + q(m.getTopic()) + ",\"queueId\":" + m.getQueueId()
            + ",\"queueOffset\":" + m.getQueueOffset() + ",\"tags\":" + q(m.getTags()) + ",\"keys\":" + q(m.getKeys())
            + ",\"reconsumeTimes\":" + m.getReconsumeTimes() + ",\"brokerName\":" + q(m.getBrokerName())
            + ",\"props\":" + props(userProps(m)) + ",\"body\":" + q(Base64.getEncoder().encodeToString(m.getBody())) + "}";
    }

    static void consume() throws Exception {
        String kind = opt("kind", "concurrent"), topic = opt("topic", "StockTopic");
        String group = opt("group", "stock-client-consumer");
        int count = intOpt("count", 10);
        long idleMs = intOpt("idle_s", 20) * 1000L;
        ConsumeFromWhere from = opt("from", "first").equals("first")
            ? ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET : ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET;
        AtomicInteger got = new AtomicInteger();
        AtomicLong last = new AtomicLong(System.currentTimeMillis());
        List<String> lines = new ArrayList<>();
        Object lock = new Object();
        if (kind.equals("lite")) {
            DefaultLitePullConsumer c = new DefaultLitePullConsumer(group, hook());
            c.setNamesrvAddr(opt("namesrv", "127.0.0.1:9876"));
            deadlines(c);
            c.setInstanceName("stock-client-" + ProcessHandle.current().pid());
            c.setConsumeFromWhere(from);
            c.subscribe(topic, "*");
            c.start();
            try {
                while (got.get() < count && System.currentTimeMillis() - last.get() < idleMs) {
                    List<MessageExt> batch = c.poll(1000);
                    for (MessageExt m : batch) {
                        lines.add(received(m));
                        got.incrementAndGet();
                    }
                    if (!batch.isEmpty()) last.set(System.currentTimeMillis());
                }
                c.commitSync();  // what was polled is consumed; shutdown persists it to the broker
            } finally {
                c.shutdown();
            }
        } else {
            DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, hook(), new AllocateMessageQueueAveragely());
            c.setNamesrvAddr(opt("namesrv", "127.0.0.1:9876"));
            deadlines(c);
            c.setInstanceName("stock-client-" + ProcessHandle.current().pid());
            c.setConsumeFromWhere(from);
            c.subscribe(topic, "*");
            if (kind.equals("orderly")) {
                c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                    synchronized (lock) {
                        if (got.get() >= count) return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
                        for (MessageExt m : msgs) lines.add(received(m));
                        got.addAndGet(msgs.size());
                        last.set(System.currentTimeMillis());
                    }
                    return ConsumeOrderlyStatus.SUCCESS;
                });
            } else if (kind.equals("concurrent")) {
                c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                    synchronized (lock) {
                        if (got.get() >= count) return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                        for (MessageExt m : msgs) lines.add(received(m));
                        got.addAndGet(msgs.size());
                        last.set(System.currentTimeMillis());
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
            } else {
                throw new IllegalArgumentException("unknown consume kind '" + kind + "'");
            }
            c.start();
            while (got.get() < count && System.currentTimeMillis() - last.get() < idleMs) Thread.sleep(100);
            c.shutdown();  // persists the consumed offsets
        }
        synchronized (lock) {
            for (String l : lines) OUT.println(l);
            OUT.println("{\"summary\":\"consume\",\"kind\":" + q(kind) + ",\"received\":" + lines.size() + "}");
        }
    }

    static void retry() throws Exception {
        String topic = opt("topic", "StockTopic"), group = opt("group", "stock-client-retry");
        int count = intOpt("count", 1);
        long idleMs = intOpt("idle_s", 60) * 1000L;
        AtomicLong last = new AtomicLong(System.currentTimeMillis());
        List<String> lines = new ArrayList<>();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, hook(), new AllocateMessageQueueAveragely());
        c.setNamesrvAddr(opt("namesrv", "127.0.0.1:9876"));
        deadlines(c);
        c.setInstanceName("stock-client-" + ProcessHandle.current().pid());
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setMaxReconsumeTimes(intOpt("max_reconsume", 1));
        c.subscribe(topic, "*");
        Set<String> finals = ConcurrentHashMap.newKeySet();
        int max = intOpt("max_reconsume", 1);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            synchronized (lines) {
                for (MessageExt m : msgs) {
                    lines.add(received(m));
                    if (m.getReconsumeTimes() >= max) finals.add(m.getMsgId());
                }
                last.set(System.currentTimeMillis());
            }
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        });
        c.start();
        // Done when every message had its last delivery, and a little after (the send-back).
        while (finals.size() < count && System.currentTimeMillis() - last.get() < idleMs) Thread.sleep(100);
        Thread.sleep(3000);
        c.shutdown();
        synchronized (lines) {
            for (String l : lines) OUT.println(l);
            OUT.println("{\"summary\":\"retry\",\"deliveries\":" + lines.size() + ",\"exhausted\":" + finals.size() + "}");
        }
    }

    // ---- load, failover, verify -----------------------------------------------------------

    static long p99(List<Long> nanos) {
        if (nanos.isEmpty()) return -1;
        long[] a = nanos.stream().mapToLong(Long::longValue).sorted().toArray();
        return a[Math.max(0, (int) Math.ceil(0.99 * a.length) - 1)];
    }

    static void sleepUntil(long nanoTime) throws InterruptedException {
        for (long left; (left = nanoTime - System.nanoTime()) > 0; ) {
            TimeUnit.NANOSECONDS.sleep(left);
        }
    }

    /** A line the driver acts on at once: `{"event":NAME}`, flushed. */
    static void event(String name) {
        synchronized (OUT) {
            OUT.println("{\"event\":\"" + name + "\"}");
            OUT.flush();
        }
    }

    static void load() throws Exception {
        String topic = opt("topic", "BenchTopic"), run = opt("run", "load");
        int threads = intOpt("threads", 16), batch = intOpt("batch", 1), size = intOpt("size", 1024);
        long seconds = intOpt("seconds", 10), warmup = intOpt("warmup_s", 2);
        DefaultMQProducer p = producer("");
        List<List<Long>> lat = new ArrayList<>();
        List<StringBuilder> acks = new ArrayList<>();
        AtomicLong counted = new AtomicLong(), errors = new AtomicLong();
        long t0 = System.nanoTime(), start = t0 + warmup * 1_000_000_000L, end = start + seconds * 1_000_000_000L;
        Thread[] ts = new Thread[threads];
        for (int t = 0; t < threads; t++) {
            List<Long> l = new ArrayList<>();
            StringBuilder a = new StringBuilder();
            lat.add(l);
            acks.add(a);
            final int tid = t;
            ts[t] = new Thread(() -> {
                long seq = 0;
                while (System.nanoTime() < end) {
                    List<Message> ms = new ArrayList<>(batch);
                    for (int i = 0; i < batch; i++) {
                        String id = run + "-" + tid + "-" + (seq++);
                        Message m = new Message(topic, body(id, size));
                        m.setKeys(id);
                        ms.add(m);
                    }
                    long s = System.nanoTime();
                    try {
                        SendResult r = batch == 1 ? p.send(ms.get(0)) : p.send((Collection<Message>) ms);
                        long e = System.nanoTime();
                        if (r.getSendStatus() != SendStatus.SEND_OK) { errors.incrementAndGet(); continue; }
                        String[] ids = r.getMsgId().split(",");
                        for (int i = 0; i < ms.size(); i++) {
                            a.append(ids[i]).append('\t').append(bodyId(ms.get(i).getBody())).append('\t')
                                .append(r.getMessageQueue().getBrokerName()).append('\t')
                                .append(r.getMessageQueue().getQueueId()).append('\t')
                                .append(r.getQueueOffset() + i).append('\n');
                        }
                        if (s >= start && e <= end) {
                            l.add(e - s);
                            counted.addAndGet(ms.size());
                        }
                    } catch (Exception ex) {
                        errors.incrementAndGet();
                    }
                }
            });
            ts[t].start();
        }
        // Markers at the measured window's edges, so a driver can sample CPU over exactly it.
        sleepUntil(start);
        event("measuring");
        sleepUntil(end);
        event("measured");
        for (Thread t : ts) t.join();
        p.shutdown();
        List<Long> all = new ArrayList<>();
        for (List<Long> l : lat) all.addAll(l);
        try (BufferedWriter w = Files.newBufferedWriter(Paths.get(opt("acks", "acks.tsv")))) {
            for (StringBuilder a : acks) w.append(a);
        }
        OUT.println("{\"summary\":\"load\",\"threads\":" + threads + ",\"batch\":" + batch + ",\"seconds\":" + seconds
            + ",\"messages\":" + counted.get() + ",\"calls\":" + all.size() + ",\"errors\":" + errors.get()
            + ",\"msgs_per_s\":" + String.format("%.1f", counted.get() / (double) seconds)
            + ",\"p99_ms\":" + String.format("%.3f", p99(all) / 1e6) + "}");
    }

    static void failover() throws Exception {
        String topic = opt("topic", "FailoverTopic"), run = opt("run", "fo");
        long seconds = intOpt("seconds", 60), end = System.currentTimeMillis() + seconds * 1000;
        Path stop = Paths.get(opt("stop", "/nonexistent-stop-file"));
        DefaultMQProducer p = producer("");
        long seq = 0;
        try (BufferedWriter acks = Files.newBufferedWriter(Paths.get(opt("acks", "acks.tsv")));
             BufferedWriter log = Files.newBufferedWriter(Paths.get(opt("log", "failover.log")))) {
            while (System.currentTimeMillis() < end && !Files.exists(stop)) {
                String id = run + "-" + (seq++);
                Message m = new Message(topic, body(id, intOpt("size", 1024)));
                m.setKeys(id);
                try {
                    SendResult r = p.send(m);
                    long now = System.currentTimeMillis();
                    if (r.getSendStatus() == SendStatus.SEND_OK) {
                        acks.append(r.getMsgId() + "\t" + id + "\t" + r.getMessageQueue().getBrokerName() + "\t"
                            + r.getMessageQueue().getQueueId() + "\t" + r.getQueueOffset() + "\t"
                            + r.getOffsetMsgId() + "\t" + now + "\n");
                        acks.flush();
                    }
                    log.append("ok\t" + now + "\t" + r.getSendStatus() + "\t" + r.getMsgId() + "\n");
                } catch (Exception e) {
                    log.append("err\t" + System.currentTimeMillis() + "\t" + e.getClass().getSimpleName() + "\n");
                    Thread.sleep(10);  // a dead address refuses at once: don't spin
                }
                log.flush();
            }
        } finally {
            p.shutdown();
        }
        OUT.println("{\"summary\":\"failover\",\"sent\":" + seq + "}");
    }

    /** Fetch `topic`'s route into the producer (retrying until `timeoutMs`), so sends that
     * follow do not pay for the lookup inside their own timeout. A topic with no route yet
     * (one the first send auto-creates) is left to the send, as before. */
    static void routeOf(DefaultMQProducer p, String topic, long timeoutMs) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (true) {
            try {
                p.fetchPublishMessageQueues(topic);
                return;
            } catch (Exception e) {
                if (System.currentTimeMillis() > deadline) {
                    System.err.println("route of " + topic + " not fetched: " + e);
                    return;
                }
                Thread.sleep(200);
            }
        }
    }

    static void delayed() throws Exception {
        String topic = opt("topic", "StockDelay"), run = opt("run", "d"), kind = opt("kind", "deliver");
        int count = intOpt("count", 0), size = intOpt("size", 1024), rate = intOpt("rate", 0);
        long delayMs = Long.parseLong(opt("delay_ms", "5000")), spreadMs = Long.parseLong(opt("spread_ms", "0"));
        int level = intOpt("level", 3);
        long atMs = Long.parseLong(opt("at_ms", "0"));
        Path stop = Paths.get(opt("stop", "/nonexistent-stop-file"));
        DefaultMQProducer p = producer("");
        // The route first: a fresh producer's first send spends its 3 s budget on the route
        // lookup too, and CI run 46 saw that lookup take 2 s under load (the send then timed out).
        routeOf(p, topic, 30_000);
        long seq = 0, ok = 0, start = System.nanoTime();
        try (BufferedWriter acks = Files.newBufferedWriter(Paths.get(opt("acks", "delayed.tsv")))) {
            while ((count == 0 || seq < count) && !Files.exists(stop)) {
                if (rate > 0) sleepUntil(start + seq * 1_000_000_000L / rate);
                String id = run + "-" + seq;
                long delay = delayMs + (count > 0 ? seq * spreadMs / count : (seq % 100) * spreadMs / 100);
                seq++;
                Message m = new Message(topic, body(id, size));
                m.setKeys(id);
                long sentAt = System.currentTimeMillis(), deliverAt = -1, asked = delay;
                switch (kind) {
                    case "level": m.setDelayTimeLevel(level); asked = level; break;
                    case "deliver":
                        deliverAt = atMs > 0 && count > 0 ? atMs + (seq - 1) * spreadMs / count : sentAt + delay;
                        m.setDeliverTimeMs(deliverAt);
                        asked = deliverAt - sentAt;
                        break;
                    case "sec": m.setDelayTimeSec(delay / 1000); asked = delay / 1000 * 1000; break;
                    case "ms": m.setDelayTimeMs(delay); break;
                    default: throw new IllegalArgumentException("unknown delayed kind '" + kind + "'");
                }
                try {
                    SendResult r = p.send(m);
                    if (r.getSendStatus() == SendStatus.SEND_OK) {
                        ok++;
                        acks.append(id + "\t" + r.getMsgId() + "\t" + sentAt + "\t" + System.currentTimeMillis()
                            + "\t" + asked + "\t" + deliverAt + "\n");
                        acks.flush();
                    }
                } catch (Exception e) {
                    System.err.println("send " + id + ": " + e);
                    Thread.sleep(10);  // a dead address refuses at once: don't spin
                }
            }
        } finally {
            p.shutdown();
        }
        OUT.println("{\"summary\":\"delayed\",\"sent\":" + seq + ",\"sendOk\":" + ok + "}");
    }

    static void backoff() throws Exception {
        String topic = opt("topic", "StockBackoff"), group = opt("group", "stock-client-backoff");
        int count = intOpt("count", 1), until = intOpt("until", 1);
        long idleMs = intOpt("idle_s", 120) * 1000L;
        AtomicLong last = new AtomicLong(System.currentTimeMillis());
        Set<String> done = ConcurrentHashMap.newKeySet();
        try (BufferedWriter out = Files.newBufferedWriter(Paths.get(opt("out", "backoff.tsv")))) {
            DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, hook(), new AllocateMessageQueueAveragely());
            c.setNamesrvAddr(opt("namesrv", "127.0.0.1:9876"));
            deadlines(c);
            c.setInstanceName("stock-client-" + ProcessHandle.current().pid());
            c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            c.subscribe(topic, "*");
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                long now = System.currentTimeMillis();
                boolean later = false;
                synchronized (out) {
                    try {
                        for (MessageExt m : msgs) {
                            String id = bodyId(m.getBody());
                            out.append(now + "\t" + id + "\t" + m.getReconsumeTimes() + "\t" + m.getTopic() + "\n");
                            if (m.getReconsumeTimes() >= until) done.add(id); else later = true;
                        }
                        out.flush();
                    } catch (java.io.IOException e) {
                        return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                    }
                }
                last.set(now);
                return later ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            while (done.size() < count && System.currentTimeMillis() - last.get() < idleMs) Thread.sleep(100);
            c.shutdown();
        }
        OUT.println("{\"summary\":\"backoff\",\"done\":" + done.size() + "}");
    }

    static void follow() throws Exception {
        String topic = opt("topic", "StockTopic"), group = opt("group", "stock-client-follow");
        int size = intOpt("size", 1024);
        Path stop = Paths.get(opt("stop", "/nonexistent-stop-file"));
        AtomicLong received = new AtomicLong();
        try (BufferedWriter out = Files.newBufferedWriter(Paths.get(opt("out", "follow.tsv")))) {
            DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, hook(), new AllocateMessageQueueAveragely());
            c.setNamesrvAddr(opt("namesrv", "127.0.0.1:9876"));
            deadlines(c);
            c.setInstanceName("stock-client-" + ProcessHandle.current().pid());
            c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            c.subscribe(topic, "*");
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                long now = System.currentTimeMillis();
                synchronized (out) {
                    try {
                        for (MessageExt m : msgs) {
                            String id = bodyId(m.getBody());
                            boolean ok = Arrays.equals(m.getBody(), body(id, size));
                            out.append(now + "\t" + id + "\t" + m.getQueueId() + "\t" + m.getQueueOffset() + "\t" + ok + "\n");
                        }
                    } catch (java.io.IOException e) {
                        return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                    }
                    received.addAndGet(msgs.size());
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            try {
                while (!Files.exists(stop)) {
                    Thread.sleep(1000);
                    synchronized (out) { out.flush(); }
                }
            } finally {
                c.shutdown();
                synchronized (out) { out.flush(); }
            }
        }
        OUT.println("{\"summary\":\"follow\",\"received\":" + received.get() + "}");
    }

    /**
     * Every acked message must come back with its body. Matched by body id, which is unique per
     * message: a stock 5.3 broker stores every message of a batch under the batch's UNIQ_KEY, so
     * a consumer sees one msgId for all of them while SendResult listed one per message.
     * Consumed msgIds that differ from the acked ones are counted apart (msgIdDiffers).
     */
    static void verify() throws Exception {
        String topic = opt("topic", "BenchTopic");
        int size = intOpt("size", 1024);
        Map<String, String> acked = new HashMap<>();  // body id -> msgId
        Map<String, String> place = new HashMap<>();  // body id -> "queueId/queueOffset"
        for (String f : opt("acks", "acks.tsv").split(",")) {
            for (String line : Files.readAllLines(Paths.get(f))) {
                String[] parts = line.split("\t");
                if (parts.length >= 2) acked.put(parts[1], parts[0]);
                if (parts.length >= 5) place.put(parts[1], parts[3] + "/" + parts[4]);
            }
        }
        // place=true (single sends only: a batch's SendResult has one offset for all): every
        // acked message must be consumed at the queue and offset its SEND_OK named (a send
        // that failed and was retried may also be stored a second time: at-least-once).
        boolean checkPlace = opt("place", "false").equals("true");
        long idleMs = intOpt("idle_s", 20) * 1000L, last = System.currentTimeMillis();
        Set<String> seen = new HashSet<>();
        Set<String> badBody = new HashSet<>();
        Set<String> placed = new HashSet<>();
        long received = 0, msgIdDiffers = 0;
        String group = opt("group", "stock-client-verify-" + System.nanoTime());
        AtomicLong lastSeen = new AtomicLong(last);
        AtomicLong receivedCount = new AtomicLong(), differs = new AtomicLong();
        java.util.function.Consumer<MessageExt> check = m -> {
            synchronized (seen) {
                receivedCount.incrementAndGet();
                lastSeen.set(System.currentTimeMillis());
                String id = bodyId(m.getBody());
                String msgId = acked.get(id);
                if (msgId == null) return;
                if (!msgId.equals(m.getMsgId())) differs.incrementAndGet();
                if (checkPlace && (m.getQueueId() + "/" + m.getQueueOffset()).equals(place.get(id))) {
                    placed.add(id);
                }
                if (Arrays.equals(m.getBody(), body(id, size))) seen.add(id);
                else badBody.add(id);
            }
        };
        if (opt("consumer", "lite").equals("push")) {
            // A DefaultMQPushConsumer of a new group from the first offset (concurrent).
            DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, hook(), new AllocateMessageQueueAveragely());
            c.setNamesrvAddr(opt("namesrv", "127.0.0.1:9876"));
            deadlines(c);
            c.setInstanceName("stock-client-" + ProcessHandle.current().pid());
            c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            c.subscribe(topic, "*");
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                msgs.forEach(check);
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            while (true) {
                synchronized (seen) {
                    if (seen.size() >= acked.size() || System.currentTimeMillis() - lastSeen.get() >= idleMs) break;
                }
                Thread.sleep(100);
            }
            c.shutdown();
        } else {
            DefaultLitePullConsumer c = new DefaultLitePullConsumer(group, hook());
            c.setNamesrvAddr(opt("namesrv", "127.0.0.1:9876"));
            deadlines(c);
            c.setInstanceName("stock-client-" + ProcessHandle.current().pid());
            c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            c.setPullBatchSize(256);
            c.subscribe(topic, "*");
            c.start();
            try {
                while (seen.size() < acked.size() && System.currentTimeMillis() - lastSeen.get() < idleMs) {
                    c.poll(1000).forEach(check);
                }
            } finally {
                c.shutdown();
            }
        }
        received = receivedCount.get();
        msgIdDiffers = differs.get();
        List<String> lost = new ArrayList<>();
        for (Map.Entry<String, String> e : acked.entrySet()) if (!seen.contains(e.getKey())) lost.add(e.getValue() + "/" + e.getKey());
        StringBuilder sample = new StringBuilder("[");
        for (int i = 0; i < Math.min(10, lost.size()); i++) sample.append(i > 0 ? "," : "").append(q(lost.get(i)));
        OUT.println("{\"summary\":\"verify\",\"acked\":" + acked.size() + ",\"received\":" + received
            + ",\"found\":" + seen.size() + ",\"lost\":" + lost.size() + ",\"badBody\":" + badBody.size()
            + ",\"msgIdDiffers\":" + msgIdDiffers
            + ",\"placeDiffers\":" + (checkPlace ? acked.size() - placed.size() : 0)
            + ",\"lostSample\":" + sample + "]}");
    }
}
