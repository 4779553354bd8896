// CountingEngine is the Debezium peer of tidemark-bench's CDC catch-up
// scenario (internal/bench/debezium.go): Debezium's embedded engine with the
// PostgreSQL connector, whose consumer only counts what it is given. It is the
// least a Debezium application can do with a change, so the rate measured is
// Debezium's ceiling on this machine, not that of any real sink.
//
//   java -cp 'classes:lib/*' CountingEngine engine.properties
//
// The properties file holds the whole engine and connector configuration
// (the harness writes it, mode 0600: it holds the password). Records are
// passed as Kafka Connect SourceRecords (no JSON or Avro serialisation), every
// one marked processed, so offsets are flushed every offset.flush.interval.ms
// and the connector confirms them to the replication slot. The harness decides
// when the backlog is drained from the slot's confirmed_flush_lsn; then it
// sends SIGTERM, and this program closes the engine (a last offset flush),
// prints one line
//
//   tidemark-debezium: records=<all records> changes=<data change records>
//
// and exits 0. A failed engine prints "tidemark-debezium: engine failed: ..."
// and exits 1.
import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;

import java.io.FileInputStream;
import java.io.InputStream;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;

import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.source.SourceRecord;

public final class CountingEngine {
    private static final String PREFIX = "tidemark-debezium: ";

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println(PREFIX + "usage: CountingEngine <engine.properties>");
            System.exit(2);
        }
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(args[0])) {
            props.load(in);
        }

        LongAdder records = new LongAdder();
        LongAdder changes = new LongAdder();
        DebeziumEngine<RecordChangeEvent<SourceRecord>> engine = DebeziumEngine.create(ChangeEventFormat.of(Connect.class))
                .using(props)
                .notifying((List<RecordChangeEvent<SourceRecord>> batch, DebeziumEngine.RecordCommitter<RecordChangeEvent<SourceRecord>> committer) -> {
                    for (RecordChangeEvent<SourceRecord> r : batch) {
                        records.increment();
                        // Data changes carry Debezium's envelope; heartbeats,
                        // logical messages and transaction markers do not.
                        Schema s = r.record().valueSchema();
                        if (s != null && s.name() != null && s.name().endsWith(".Envelope")) {
                            changes.increment();
                        }
                        committer.markProcessed(r);
                    }
                    committer.markBatchFinished();
                })
                .using((boolean success, String message, Throwable error) -> {
                    if (!success) {
                        System.out.println(PREFIX + "engine failed: " + message + (error == null ? "" : ": " + error));
                        System.out.flush();
                        Runtime.getRuntime().halt(1);
                    }
                })
                .build();

        ExecutorService executor = Executors.newSingleThreadExecutor();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            int code = 0;
            try {
                engine.close();
                executor.shutdown();
                if (!executor.awaitTermination(50, TimeUnit.SECONDS)) {
                    System.out.println(PREFIX + "engine did not stop within 50 s");
                    code = 1;
                }
            }
            catch (Exception e) {
                System.out.println(PREFIX + "close: " + e);
                code = 1;
            }
            System.out.println(PREFIX + "records=" + records.sum() + " changes=" + changes.sum());
            System.out.flush();
            // SIGTERM would otherwise end the JVM with status 143: a clean
            // close is status 0, a failed one 1.
            Runtime.getRuntime().halt(code);
        }, "tidemark-debezium-shutdown"));
        executor.execute(engine);
    }
}
