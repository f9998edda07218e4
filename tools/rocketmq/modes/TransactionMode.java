import java.io.BufferedWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Mode `transaction`: a stock TransactionMQProducer whose local transaction answers by the
 * message's kind, which its id (and key) names: "<run>-commit-<i>" COMMIT_MESSAGE,
 * "<run>-rollback-<i>" ROLLBACK_MESSAGE, "<run>-unknown-<i>" UNKNOW. A check back
 * (checkLocalTransaction) answers COMMIT_MESSAGE for an unknown one once the gate file exists
 * (UNKNOW before), ROLLBACK_MESSAGE for a rolled-back one and COMMIT_MESSAGE for a committed
 * one.
 *
 *   transaction kinds=commit,rollback,unknown count=N acks=FILE checks=FILE [gate=FILE]
 *               [stop=FILE] [wait_s=S] [rate=R] [done=FILE] [run=ID] [size=1024] [group=G]
 *               [heartbeat_ms=1000] [send_timeout_ms=3000]
 *
 * Sends `count` messages of each kind in turn (sendMessageInTransaction, sync; R a second at
 * most), a line per SEND_OK to acks: bodyId, kind, msgId, the local state answered, sentAtMs;
 * creates the done file after the last send; then keeps the producer (and its check-back
 * listener) running until the stop file exists or wait_s passed.
 * Every check appends "checkAtMs\tbodyId\tTRANSACTION_CHECK_TIMES\tanswer" to checks (flushed).
 * The producer heartbeats every heartbeat_ms, so a new master knows it soon after a failover;
 * send_timeout_ms is its send timeout (the client's 3 s by default: a loaded machine's first
 * sends to a new topic may need more).
 */
public class TransactionMode {
    static String kindOf(String id) {
        String[] parts = id.split("-");
        return parts.length >= 3 ? parts[parts.length - 2] : "";
    }

    static void run() throws Exception {
        String topic = StockClient.opt("topic", "StockTransaction"), run = StockClient.opt("run", "tx");
        String[] kinds = StockClient.opt("kinds", "commit,rollback,unknown").split(",");
        int count = StockClient.intOpt("count", 10), size = StockClient.intOpt("size", 1024);
        int rate = StockClient.intOpt("rate", 0);
        long start = System.nanoTime();
        long waitMs = StockClient.intOpt("wait_s", 0) * 1000L;
        Path gate = Paths.get(StockClient.opt("gate", "/nonexistent-gate-file"));
        Path stop = Paths.get(StockClient.opt("stop", "/nonexistent-stop-file"));
        AtomicLong checks = new AtomicLong();
        long ok = 0, sent = 0;
        try (BufferedWriter acks = Files.newBufferedWriter(Paths.get(StockClient.opt("acks", "tx-acks.tsv")));
             BufferedWriter checkLog = Files.newBufferedWriter(Paths.get(StockClient.opt("checks", "tx-checks.tsv")))) {
            TransactionMQProducer p = new TransactionMQProducer(
                StockClient.opt("group", "stock-client-tx-producer"), StockClient.hook());
            p.setNamesrvAddr(StockClient.opt("namesrv", "127.0.0.1:9876"));
            StockClient.deadlines(p);
            p.setInstanceName("stock-client-" + ProcessHandle.current().pid());
            p.setHeartbeatBrokerInterval(StockClient.intOpt("heartbeat_ms", 1000));
            p.setSendMsgTimeout(StockClient.intOpt("send_timeout_ms", 3000));
            p.setTransactionListener(new TransactionListener() {
                @Override
                public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                    switch (kindOf(msg.getKeys())) {
                        case "commit": return LocalTransactionState.COMMIT_MESSAGE;
                        case "rollback": return LocalTransactionState.ROLLBACK_MESSAGE;
                        default: return LocalTransactionState.UNKNOW;
                    }
                }

                @Override
                public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                    String id = StockClient.bodyId(msg.getBody());
                    LocalTransactionState answer;
                    switch (kindOf(id)) {
                        case "commit": answer = LocalTransactionState.COMMIT_MESSAGE; break;
                        case "rollback": answer = LocalTransactionState.ROLLBACK_MESSAGE; break;
                        default:
                            answer = Files.exists(gate) ? LocalTransactionState.COMMIT_MESSAGE
                                : LocalTransactionState.UNKNOW;
                    }
                    synchronized (checkLog) {
                        try {
                            checkLog.append(System.currentTimeMillis() + "\t" + id + "\t"
                                + msg.getProperty("TRANSACTION_CHECK_TIMES") + "\t" + answer + "\n");
                            checkLog.flush();
                        } catch (java.io.IOException e) {
                            System.err.println("check log: " + e);
                        }
                    }
                    checks.incrementAndGet();
                    return answer;
                }
            });
            p.start();
            try {
                for (int i = 0; i < count; i++) {
                    for (String kind : kinds) {
                        if (rate > 0) StockClient.sleepUntil(start + sent * 1_000_000_000L / rate);
                        String id = run + "-" + kind + "-" + i;
                        Message m = new Message(topic, StockClient.body(id, size));
                        m.setKeys(id);
                        long sentAt = System.currentTimeMillis();
                        sent++;
                        try {
                            TransactionSendResult r = p.sendMessageInTransaction(m, null);
                            if (r.getSendStatus() == SendStatus.SEND_OK) {
                                ok++;
                                acks.append(id + "\t" + kind + "\t" + r.getMsgId() + "\t"
                                    + r.getLocalTransactionState() + "\t" + sentAt + "\n");
                                acks.flush();
                            }
                        } catch (Exception e) {
                            System.err.println("send " + id + ": " + e + (e.getCause() != null ? " (" + e.getCause() + ")" : ""));
                        }
                    }
                }
                String done = StockClient.opt("done", "");
                if (!done.isEmpty()) Files.write(Paths.get(done), new byte[0]);
                long end = System.currentTimeMillis() + waitMs;
                while (!Files.exists(stop) && (waitMs == 0 || System.currentTimeMillis() < end)) {
                    if (waitMs == 0 && !StockClient.opts.containsKey("stop")) break;
                    Thread.sleep(200);
                }
            } finally {
                p.shutdown();
            }
        }
        StockClient.OUT.println("{\"summary\":\"transaction\",\"sent\":" + sent + ",\"sendOk\":" + ok
            + ",\"checks\":" + checks.get() + "}");
    }
}
