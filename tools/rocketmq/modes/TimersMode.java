import java.io.BufferedWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

/**
 * Mode `timers` (bench/delay.py): `count` timer messages (setDeliverTimeMs) from `threads`
 * sending threads of one producer, message i sent at start + i/rate and due at
 * at_ms + i*spread_ms/count, so a full run keeps its schedule where one synchronous thread
 * cannot (a send's round trip through SYNC_FLUSH and the replicas is milliseconds).
 * Acks as `delayed` writes them: id, msgId, sentAt, ackAt, asked, deliverAt (tab-separated);
 * a send answered but not SEND_OK is on stderr with its status. Stops early at `stop`.
 */
public class TimersMode {
    static void run() throws Exception {
        String topic = StockClient.opt("topic", "StockTimers"), run = StockClient.opt("run", "t");
        int count = StockClient.intOpt("count", 1000), size = StockClient.intOpt("size", 1024);
        int rate = StockClient.intOpt("rate", 100), threads = StockClient.intOpt("threads", 8);
        long atMs = Long.parseLong(StockClient.opt("at_ms", "0"));
        long spreadMs = Long.parseLong(StockClient.opt("spread_ms", "60000"));
        Path stop = Paths.get(StockClient.opt("stop", "/nonexistent-stop-file"));
        long firstAt = atMs > 0 ? atMs : System.currentTimeMillis() + 10_000;
        DefaultMQProducer p = StockClient.producer("");
        AtomicLong next = new AtomicLong(), ok = new AtomicLong(), failed = new AtomicLong();
        long start = System.nanoTime();
        try (BufferedWriter acks = Files.newBufferedWriter(Paths.get(StockClient.opt("acks", "timers.tsv")))) {
            List<Thread> workers = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                Thread w = new Thread(() -> {
                    while (!Files.exists(stop)) {
                        long seq = next.getAndIncrement();
                        if (seq >= count) return;
                        try {
                            StockClient.sleepUntil(start + seq * 1_000_000_000L / rate);
                        } catch (InterruptedException e) {
                            return;
                        }
                        String id = run + "-" + seq;
                        Message m = new Message(topic, StockClient.body(id, size));
                        m.setKeys(id);
                        long deliverAt = firstAt + seq * spreadMs / count;
                        m.setDeliverTimeMs(deliverAt);
                        long sentAt = System.currentTimeMillis();
                        try {
                            SendResult r = p.send(m);
                            if (r.getSendStatus() == SendStatus.SEND_OK) {
                                ok.incrementAndGet();
                                String line = id + "\t" + r.getMsgId() + "\t" + sentAt + "\t"
                                    + System.currentTimeMillis() + "\t" + (deliverAt - sentAt) + "\t" + deliverAt + "\n";
                                synchronized (acks) {
                                    acks.append(line);
                                    acks.flush();
                                }
                            } else {
                                failed.incrementAndGet();
                                System.err.println("send " + id + ": " + r.getSendStatus());
                            }
                        } catch (Exception e) {
                            failed.incrementAndGet();
                            System.err.println("send " + id + ": " + e);
                            try {
                                Thread.sleep(10);  // a dead address refuses at once: don't spin
                            } catch (InterruptedException ie) {
                                return;
                            }
                        }
                    }
                }, "timers-" + t);
                w.start();
                workers.add(w);
            }
            for (Thread w : workers) w.join();
        } finally {
            p.shutdown();
        }
        long sent = Math.min(next.get(), count);
        StockClient.OUT.println("{\"summary\":\"timers\",\"sent\":" + sent + ",\"sendOk\":" + ok.get()
            + ",\"failed\":" + failed.get() + ",\"threads\":" + threads + "}");
    }
}
