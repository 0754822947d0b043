package io.headrace.debezium;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

/** Runs Debezium's MariaDB connector (its MySQL connector refuses MariaDB) in its embedded engine and prints each change event as
 *  one line: topic TAB key TAB value (JSON, no schemas). Runs until stdin closes.
 *  Arguments: host port user database topic-prefix table-include-list server-id. */
public class DebeziumMariaDbCapture {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.setProperty("name", "headrace-compare-mariadb");
        p.setProperty("connector.class", "io.debezium.connector.mariadb.MariaDbConnector");
        p.setProperty("offset.storage", "org.apache.kafka.connect.storage.MemoryOffsetBackingStore");
        p.setProperty("offset.flush.interval.ms", "1000");
        p.setProperty("schema.history.internal", "io.debezium.relational.history.MemorySchemaHistory");
        p.setProperty("database.hostname", args[0]);
        p.setProperty("database.port", args[1]);
        p.setProperty("database.user", args[2]);
        p.setProperty("database.password", "");
        p.setProperty("database.include.list", args[3]);
        p.setProperty("topic.prefix", args[4]);
        p.setProperty("table.include.list", args[5]);
        p.setProperty("database.server.id", args[6]);
        p.setProperty("snapshot.mode", "initial");
        p.setProperty("include.schema.changes", "false");
        p.setProperty("converter.schemas.enable", "false");
        p.setProperty("key.converter.schemas.enable", "false");
        p.setProperty("value.converter.schemas.enable", "false");
        DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
                .using(p)
                .notifying(r -> {
                    synchronized (System.out) {
                        System.out.println(r.destination() + "\t" + r.key() + "\t" + r.value());
                        System.out.flush();
                    }
                })
                .using((success, message, error) -> {
                    if (!success) {
                        System.err.println("debezium failed: " + message);
                        if (error != null) {
                            error.printStackTrace();
                        }
                    }
                })
                .build();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        executor.execute(engine);
        System.err.println("debezium started");
        while (System.in.read() != -1) {
            // the parent closes stdin to stop us
        }
        engine.close();
        executor.shutdown();
        executor.awaitTermination(10, TimeUnit.SECONDS);
    }
}
